"""One job description, three schedulers: the Slurm script, the PyTorchJob and the TrainJob are
checked against their schemas (shellcheck, the v1 operator's models, Trainer v2's models) and
then run. The Slurm script runs under stand-ins for srun, scancel and scontrol
(tests/slurm_standin) that start one torchrun agent per node on 127.0.0.1 with the SLURM_*
variables; the Kubernetes files' container commands run once per pod with the PET_* variables
their controllers set, restarted the way each controller restarts (tests/k8s_standin.py).
Each survives a crash on the second node and a preemption notice, and ends with the weights of
a run without a fault."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from torchhw.distributed import agents, jobs
from torchhw.distributed import free_port

from conftest import leftovers
from k8s_standin import Pods

HERE = Path(__file__).parent
STANDIN = HERE / "slurm_standin"
IMAGE = "registry.example.org/digits:1.4.2"


@pytest.fixture(params=[dict(nodes=2, gpus_per_node=4), dict(nodes=3, cpus_per_proc=8), dict(nodes=1)])
def job(request):
    return jobs.Job("digits-ddp", image=IMAGE, **request.param)


def test_slurm_script_matches_the_job(job):
    script = jobs.slurm_script(job)
    assert script.startswith("#!/bin/bash\n")
    assert f"#SBATCH --nodes={job.nodes}\n" in script and "#SBATCH --mem=0 " in script
    assert f"#SBATCH --cpus-per-task={job.cpus_per_proc * job.procs_per_node}\n" in script
    assert (f"#SBATCH --gpus-per-node={job.gpus_per_node}" in script) == bool(job.gpus_per_node)
    assert "#SBATCH --requeue" in script and "--signal=B:USR1@" in script
    assert 'srun --cpus-per-task="$SLURM_CPUS_PER_TASK" --kill-on-bad-exit=1' in script  # every node alike
    assert script.index("source /shared/venv") < script.index("set -u\n")  # set-up before -u
    assert "source /shared/venv/bin/activate" in script
    assert f"--nnodes={job.nodes}" in script and "--rdzv-backend=c10d" in script
    assert "#SBATCH --exclusive" in script and '--output="logs/$SLURM_JOB_ID/node%n.out"' in script
    assert "--log-dir=logs/$SLURM_JOB_ID" in script and "# export NCCL_SOCKET_IFNAME=" in script
    # the notice stops the step's processes with SIGTERM (never srun itself), waits for them,
    # then finish() requeues, only when the workers wrote the stop marker after their save
    notice = script[script.index("notice() {"):script.index("trap notice USR1")]
    assert notice.index('scancel --signal=TERM') < notice.index("wait") < notice.index("finish")
    finish = script[script.index("finish() {"):script.index("notice() {")]
    assert finish.index('if [ -e "$stopped" ]') < finish.index("scontrol requeue")
    # the marker reaches any program through the environment, whatever its arguments
    assert f"stopped={job.stop_marker}" in script and 'export TRAIN_STOP_MARKER="$stopped"' in script
    assert "--stop-marker" not in script
    assert script.rstrip().endswith('finish "$status"')
    # the port: per job, and below Linux's ephemeral range (32768-60999)
    port = re.search(r"port=\$\(\((\d+) \+ SLURM_JOB_ID % (\d+)\)\)", script)
    assert port and int(port[1]) + int(port[2]) <= 32768 and int(port[1]) >= 1024


def test_slurm_script_passes_shellcheck(tmp_path, job):
    from torchhw.course import system

    shellcheck = system.find("shellcheck")
    if shellcheck is None:
        pytest.fail(system.advice("shellcheck"), pytrace=False)
    path = tmp_path / "job.sbatch"
    path.write_text(jobs.slurm_script(job))
    result = subprocess.run([str(shellcheck), "--shell=bash", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def kubeflow_round_trip(manifest):
    """Deserialize with the training operator's SDK models, serialize again: required fields
    missing raise, unknown fields vanish (so the round trip differs)."""
    models = pytest.importorskip("kubeflow.training", reason="pip install kubeflow-training")
    from kubeflow.training.api_client import ApiClient

    client = ApiClient()
    obj = client._ApiClient__deserialize(manifest, "KubeflowOrgV1PyTorchJob")
    assert isinstance(obj, models.KubeflowOrgV1PyTorchJob)
    return client.sanitize_for_serialization(obj)


def test_pytorchjob_validates_against_the_operator_models(job):
    manifest = yaml.safe_load(jobs.pytorchjob_yaml(job))
    assert kubeflow_round_trip(manifest) == manifest
    spec = manifest["spec"]
    assert spec["elasticPolicy"]["rdzvBackend"] == "c10d"
    assert spec["elasticPolicy"]["minReplicas"] == spec["elasticPolicy"]["maxReplicas"] == job.nodes
    assert spec["runPolicy"]["backoffLimit"] == job.max_restarts + 1  # the operator fails at >=
    pod = spec["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    # every process on the node passes batches and NCCL buffers through it: it grows with them
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["sizeLimit"] == \
        f"{job.shm_gib_per_proc * job.procs_per_node}Gi"
    assert "persistentVolumeClaim" in volumes[mounts[job.shared_dir]]
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits["cpu"] == str(job.cpus_per_node) and limits.get("nvidia.com/gpu", "0") == str(job.gpus_per_node)
    # the memory-backed /dev/shm counts against the pod's memory: it is added on top
    assert limits["memory"] == f"{job.memory_gib_per_proc * job.procs_per_node + job.shm_gib}Gi"


    assert spec["runPolicy"]["schedulingPolicy"]["minAvailable"] == job.nodes  # a gang
    assert pod["schedulerName"] == job.gang_scheduler  # named, not the operator flag's copy
    container = pod["containers"][0]
    assert container["image"] == IMAGE and container["command"][0] == "torchrun"
    assert job.script.startswith(job.shared_dir + "/")  # the code is on the mounted volume
    assert pod["terminationGracePeriodSeconds"] > job.stop_grace_s
    assert {"name": "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "value": str(job.stop_grace_s)} in container["env"]


def trainer_round_trip(document):
    """The same round trip through Kubeflow Trainer v2's models (pydantic)."""
    models = pytest.importorskip("kubeflow_trainer_api.models", reason="pip install kubeflow-trainer-api")
    cls = {"TrainJob": models.TrainerV1alpha1TrainJob,
           "TrainingRuntime": models.TrainerV1alpha1TrainingRuntime}[document["kind"]]
    return cls.from_dict(document).to_dict()


def test_trainjob_and_its_runtime_validate_against_trainer_v2_models(job):
    runtime, train = yaml.safe_load_all(jobs.trainjob_yaml(job))
    assert trainer_round_trip(runtime) == runtime and trainer_round_trip(train) == train
    assert train["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org",
                                           "kind": "TrainingRuntime", "name": runtime["metadata"]["name"]}
    trainer = train["spec"]["trainer"]
    assert trainer["numNodes"] == job.nodes and trainer["numProcPerNode"] == job.procs_per_node
    assert trainer["image"] == IMAGE and "--max-restarts=0" in trainer["command"]
    assert trainer["command"][:2] == ["sh", "-c"] and trainer["command"][3] == "torchrun"
    assert {"name": "TRAIN_STOP_MARKER", "value": job.stop_marker} in trainer["env"]
    assert "activeDeadlineSeconds" not in train["spec"]  # none unless asked: queueing counts
    spec = runtime["spec"]
    assert spec["mlPolicy"]["numNodes"] == job.nodes and "torch" in spec["mlPolicy"]
    assert spec["podGroupPolicy"]["coscheduling"]["scheduleTimeoutSeconds"] > 0  # a gang
    assert spec["template"]["spec"]["failurePolicy"]["maxRestarts"] == job.max_restarts
    node = spec["template"]["spec"]["replicatedJobs"][0]
    assert node["name"] == "node"
    assert node["template"]["spec"]["backoffLimit"] == 0  # a failed pod fails the Job at once...
    pod = node["template"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"                # ...and is not restarted in place
    assert pod["schedulerName"] == job.gang_scheduler     # a gang needs its scheduler named
    assert pod["containers"][0]["name"] == "node"  # the container the torch plugin configures
    assert {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]} == {job.shared_dir, "/dev/shm"}


def test_a_misspelt_field_is_caught():
    manifest = jobs.pytorchjob(jobs.Job("x", image=IMAGE))
    manifest["spec"]["elasticPolicy"]["rdzvBackedn"] = "c10d"
    assert kubeflow_round_trip(manifest) != manifest
    runtime, train = yaml.safe_load_all(jobs.trainjob_yaml(jobs.Job("x", image=IMAGE)))
    train["spec"]["trainer"]["numNode"] = 2
    assert trainer_round_trip(train) != train


def test_bad_jobs_are_refused():
    with pytest.raises(ValueError, match="one GPU per process"):
        jobs.Job("x", gpus_per_node=2, procs_per_node=4)
    for name in ("My_Job", "1st-run", "run-"):      # Kubernetes refuses these names
        with pytest.raises(ValueError, match="lower-case"):
            jobs.Job(name)
    for limit in ("60", "1:00", "01:60:00", "one hour"):
        with pytest.raises(ValueError, match="HH:MM:SS"):
            jobs.Job("x", time_limit=limit)
    with pytest.raises(ValueError, match="not longer than the notice"):
        jobs.Job("x", time_limit="00:01:00", notice_s=120)
    for image in (None, "registry.example.org/digits", "registry.example.org/digits:latest",
                  "localhost:5000/digits"):
        with pytest.raises(ValueError, match="pinned"):
            jobs.pytorchjob(jobs.Job("x", image=image))
    jobs.pytorchjob(jobs.Job("x", image="localhost:5000/digits@sha256:" + "0" * 64))
    with pytest.raises(ValueError, match="shorter than the notice"):
        jobs.Job("x", notice_s=60, stop_grace_s=60)
    with pytest.raises(ValueError, match="counts the time in the queue"):
        jobs.Job("x", time_limit="04:00:00", deadline_s=3600)


def test_the_manifests_say_what_network_they_leave_to_the_cluster(job):
    for text in (jobs.pytorchjob_yaml(job), jobs.trainjob_yaml(job)):
        head = text.split("\n\n")[0]
        assert text.startswith("# Network:") and "IPC_LOCK" in head and "NCCL_IB_HCA" in head
        assert all(d for d in yaml.safe_load_all(text))   # comments only: the documents load as before


def test_a_kubernetes_deadline_only_when_asked_and_a_patient_rendezvous():
    """activeDeadlineSeconds counts queueing and ends a job for good: only when asked for.
    The PyTorchJob's pods wait up to 10 minutes for worker-0's rendezvous store."""
    plain = jobs.Job("x", image=IMAGE)
    assert "activeDeadlineSeconds" not in jobs.pytorchjob(plain)["spec"]["runPolicy"]
    assert "activeDeadlineSeconds" not in jobs.trainjob(plain)["spec"]
    bounded = jobs.Job("x", image=IMAGE, time_limit="04:00:00", deadline_s=6 * 3600)
    assert jobs.pytorchjob(bounded)["spec"]["runPolicy"]["activeDeadlineSeconds"] == 6 * 3600
    assert jobs.trainjob(bounded)["spec"]["activeDeadlineSeconds"] == 6 * 3600
    conf = {c["key"]: c["value"] for c in jobs.pytorchjob(plain)["spec"]["elasticPolicy"]["rdzvConf"]}
    assert int(conf["read_timeout"]) >= 600 and int(conf["join_timeout"]) >= 600
    assert jobs.operator_env(plain, "h:1")["PET_RDZV_CONF"] == "read_timeout=600,join_timeout=600"


def test_the_defaults_follow_the_shared_folder_the_name_and_the_gpus():
    job = jobs.Job("digits", shared_dir="/data", gpus_per_node=8)
    assert job.script == "/data/code/train.py" and job.setup == ["source /data/venv/bin/activate"]
    assert job.args == ["--device", "cuda", "--checkpoint", "/data/ckpt/digits.pt",
                        "--out", "/data/ckpt/digits.json"]
    assert job.stop_marker == "/data/ckpt/digits.stopped"
    assert jobs.Job("x", time_limit="2-01:00:30").time_limit_s == 2 * 86400 + 3600 + 30
    assert jobs.Job("cpu-job").args[:2] == ["--device", "cpu"]


def test_write_job_writes_the_script_and_every_file(tmp_path):
    paths = jobs.write_job(jobs.Job("digits-ddp", image=IMAGE), tmp_path)
    assert set(paths) == {"train.py", "digits-ddp.sbatch", "digits-ddp.pytorchjob.yaml",
                          "digits-ddp.trainjob.yaml"}
    assert paths["train.py"].read_text() == (Path(jobs.__file__).parent / "train.py").read_text()
    assert "DistributedDataParallel" in paths["train.py"].read_text()
    assert "register_comm_hook" not in paths["train.py"].read_text()  # plain DDP


# --------------------------------------------------------------------------- run them
# 2 nodes x 2 processes: with four ranks the order in which an all-reduce adds matters, so an
# exact resume is a real test. A checkpoint every 4 steps; the drills act after step 6.
STEPS, EVERY, AT = 12, 4, 6


def small_job(folder: Path, *drill: str) -> jobs.Job:
    """The course's training script on 2 x 2 CPU ranks, everything in ``folder``."""
    shared = folder / "shared"
    (shared / "ckpt").mkdir(parents=True, exist_ok=True)
    stop_marker = str(shared / "ckpt" / "job.stopped")
    args = ["--steps", str(STEPS), "--every", str(EVERY), "--checkpoint", str(shared / "ckpt" / "job.pt"),
            "--out", str(shared / "ckpt" / "job.json"), "--drill-marker", str(shared / "drill"), *drill]
    venv = Path(sys.executable).parent
    job = jobs.Job("small", script=str(shared / "train.py"), args=args, nodes=2, procs_per_node=2,
                   cpus_per_proc=1, max_restarts=jobs.DRILL_RESTARTS, stop_grace_s=30,
                   memory_gib_per_proc=1, stop_marker=stop_marker,
                   setup=[f'export PATH="{venv}:$PATH"'], shared_dir=str(shared), image=IMAGE)
    (shared / "train.py").write_text(jobs.train_script())
    return job


def result(job: jobs.Job) -> dict:
    return json.loads(Path(job.args[job.args.index("--out") + 1]).read_text())


def drill_note(job: jobs.Job) -> str:
    return Path(job.args[job.args.index("--drill-marker") + 1]).read_text()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The digest of the same job without a fault: 2 torchrun agents of 2 ranks each."""
    folder = tmp_path_factory.mktemp("reference")
    job = small_job(folder)
    agents.torchrun(job.script, job.args, nproc_per_node=2, nnodes=2, echo=None, timeout=180)
    return result(job)["digest"]


def resumed(text: str, step: int) -> bool:
    """Every one of the four ranks said it resumed from ``step``."""
    return all(f"rank {r}: generation" in text and f"resumed from step {step}" in text for r in range(4)) \
        and len(re.findall(rf"rank \d: generation \d+, resumed from step {step}", text)) >= 4


# ------------------------------------------------------------------ Slurm

def slurm_env(folder: Path, job_id: int, restart: int = 0) -> dict[str, str]:
    return dict(os.environ, PATH=f"{STANDIN}:{os.environ['PATH']}", SLURM_JOB_ID=str(job_id),
                SLURM_JOB_NODELIST="node[0-1]", SLURM_NNODES="2", SLURM_CPUS_PER_TASK="2", SLURM_CPUS_ON_NODE="2",
                SLURM_JOB_NAME="small", SLURM_RESTART_COUNT=str(restart), SLURM_STANDIN_DIR=str(folder))


def node_logs(folder: Path, job_id: int) -> str:
    return "\n".join(p.read_text() for p in sorted((folder / "logs" / str(job_id)).glob("node*.out")))


def test_the_slurm_script_survives_a_crash(tmp_path, reference):
    job = small_job(tmp_path, "--crash-at", str(AT))
    script = tmp_path / "small.sbatch"
    script.write_text(jobs.slurm_script(job))
    job_id = 10000 + free_port() % 20000
    run = subprocess.run(["bash", str(script)], cwd=tmp_path, env=slurm_env(tmp_path, job_id),
                         capture_output=True, text=True, timeout=240)
    logs = node_logs(tmp_path, job_id)
    assert run.returncode == 0, (run.stdout + run.stderr + logs)[-4000:]
    assert "crashed after step 6" in drill_note(job) and resumed(logs, 4), logs[-3000:]
    assert result(job)["digest"] == reference
    assert not (tmp_path / "requeued").exists()       # a finished run is not requeued
    assert not leftovers()


def start_batch(folder: Path, job: jobs.Job) -> tuple[Path, int, subprocess.Popen]:
    """The job's sbatch script, written to ``folder`` and started under the stand-ins as Slurm
    would start it, in the background: the script's path, its job id and the process."""
    script = folder / "small.sbatch"
    script.write_text(jobs.slurm_script(job))
    job_id = 10000 + free_port() % 20000
    batch = subprocess.Popen(["bash", str(script)], cwd=folder, env=slurm_env(folder, job_id),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return script, job_id, batch


def test_a_notice_while_the_workers_start_still_requeues(tmp_path):
    """USR1 as soon as the step runs, before the workers train (or even exist): whether they
    catch it and save at their first check, or torchrun ends before they could, the job goes
    back in the queue, to resume from what was saved."""
    job = small_job(tmp_path)
    script, job_id, batch = start_batch(tmp_path, job)
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "logs" / str(job_id)).glob("node*.out")):
            assert batch.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        batch.send_signal(signal.SIGUSR1)
        out, _ = batch.communicate(timeout=120)
    finally:
        if batch.poll() is None:
            batch.kill()
    assert batch.returncode == 0 and "requeueing" in out, (out + node_logs(tmp_path, job_id))[-3000:]
    assert (tmp_path / "requeued").read_text().split() == [str(job_id)]
    assert not leftovers()


@pytest.mark.parametrize("stop", ["notice", "preemption"])
def test_the_slurm_notice_ends_in_a_checkpoint_a_requeue_and_an_exact_resume(tmp_path, reference, stop):
    """The notice, USR1 to the batch script (--signal=B:USR1@...): the trap stops the step with
    SIGTERM. A preemption: Slurm sends the step's processes SIGTERM itself. Either way the
    workers save the step they finished, write the stop marker and exit, and the script
    requeues the job; the requeued run resumes from that step with the fault-free weights."""
    job = small_job(tmp_path, "--hold-at", str(AT))
    script, job_id, batch = start_batch(tmp_path, job)
    try:
        deadline = time.monotonic() + 180
        while f"holding after step {AT}" not in node_logs(tmp_path, job_id):
            assert batch.poll() is None and time.monotonic() < deadline, node_logs(tmp_path, job_id)[-3000:]
            time.sleep(0.2)
        if stop == "notice":
            batch.send_signal(signal.SIGUSR1)  # what Slurm sends notice_s before the time limit
        else:  # what a preemption within GraceTime does: SIGTERM to the step's processes only
            subprocess.run([str(STANDIN / "scancel"), "--signal=TERM", str(job_id)], check=True,
                           env=slurm_env(tmp_path, job_id), capture_output=True)
        out, _ = batch.communicate(timeout=120)
    finally:
        if batch.poll() is None:
            batch.kill()
    logs = node_logs(tmp_path, job_id)
    assert batch.returncode == 0 and "requeueing" in out, (out + logs)[-4000:]
    assert (tmp_path / "requeued").read_text().split() == [str(job_id)]
    assert f"stopped by a signal after step {AT}" in drill_note(job)
    assert len(re.findall(rf"stop signal SIGTERM: checkpoint of step {AT} saved", logs)) == 4, logs[-3000:]
    assert not Path(job.args[job.args.index("--out") + 1]).exists()
    assert not leftovers()
    # Slurm starts the script again from the top, on the same job id
    again = subprocess.run(["bash", str(script)], cwd=tmp_path, env=slurm_env(tmp_path, job_id, restart=1),
                           capture_output=True, text=True, timeout=240)
    logs = node_logs(tmp_path, job_id)
    assert again.returncode == 0, (again.stdout + again.stderr + logs)[-4000:]
    assert resumed(logs, AT) and result(job)["digest"] == reference
    assert not leftovers()


# ------------------------------------------------------------------ Kubernetes

def container(manifest_pod: dict) -> tuple[list[str], dict[str, str]]:
    """The container's command, with torchrun as this Python's module, and its variables."""
    c = manifest_pod["containers"][0] if "containers" in manifest_pod else manifest_pod
    command = c["command"]
    env = {e["name"]: e["value"] for e in c.get("env", [])}
    torchrun = f'{sys.executable} -m torch.distributed.run'
    if command[:2] == ["sh", "-c"]:  # the TrainJob's wrapper: sh -c SCRIPT torchrun ARGS...
        assert 'torchrun "$@"' in command[2] and command[3] == "torchrun"
        return ["sh", "-c", command[2].replace('torchrun "$@"', f'{torchrun} "$@"'), *command[3:]], env
    assert command[0] == "torchrun"
    return [*torchrun.split(), *command[1:]], env


def run_pytorchjob(job: jobs.Job, on_line=None) -> Pods:
    """The PyTorchJob's pods under the v1 operator: each restarted alone (OnFailure)."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    manifest = jobs.pytorchjob(job)
    worker = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]
    command, env = container(worker["template"]["spec"])
    # the c10d rendezvous store lives in this process, standing for the pod that the
    # operator's endpoint names, so no pod's exit takes it away from the others
    port = free_port()
    store = TCPStore("127.0.0.1", port, is_master=True, multi_tenant=True, wait_for_workers=False,
                     timeout=timedelta(seconds=240))
    env.update(jobs.operator_env(job, f"127.0.0.1:{port}"))
    pods = Pods([command] * worker["replicas"], [env] * worker["replicas"], restart="pod",
                # the operator's PastBackoffLimit: failed once the restarts reach backoffLimit
                max_restarts=manifest["spec"]["runPolicy"]["backoffLimit"] - 1, on_line=on_line)
    try:
        pods.run(timeout=240)
    finally:
        del store
    return pods


def evict_when_holding(node: int):
    def on_line(pods: Pods, i: int, line: str) -> None:
        if f"holding after step {AT}" in line:
            pods.terminate(node)
    return on_line


def test_the_pytorchjob_survives_a_crash_and_an_eviction(tmp_path, reference):
    crash = small_job(tmp_path / "crash", "--crash-at", str(AT))
    pods = run_pytorchjob(crash)
    assert "crashed after step 6" in drill_note(crash) and resumed(pods.output, 4), pods.tail()
    assert result(crash)["digest"] == reference
    assert not leftovers()

    # one pod evicted (SIGTERM to its torchrun): every rank saves step 6 and stops; the
    # operator starts the pod again, the other pod's agent restarts its workers, all resume
    evicted = small_job(tmp_path / "evict", "--hold-at", str(AT))
    pods = run_pytorchjob(evicted, on_line=evict_when_holding(1))
    assert "SIGTERM to pod 1" in pods.events and "pod 1 restarted" in pods.events, pods.tail()
    assert f"stopped by a signal after step {AT}" in drill_note(evicted)
    assert resumed(pods.output, AT) and result(evicted)["digest"] == reference, pods.tail()
    assert not leftovers()


def run_trainjob(job: jobs.Job, on_line=None) -> Pods:
    """The TrainJob's nodes under Trainer v2: static rendezvous at node 0, and any failure
    recreates every node (the JobSet's failurePolicy)."""
    runtime, train = yaml.safe_load_all(jobs.trainjob_yaml(job))
    trainer = train["spec"]["trainer"]
    command, env = container(trainer)
    port = free_port()
    envs = [dict(env, **jobs.trainer_env(job, i, "127.0.0.1", port)) for i in range(trainer["numNodes"])]
    policy = runtime["spec"]["template"]["spec"]["failurePolicy"]
    job_spec = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    # disruptions are free when the Job fails on DisruptionTarget and on the stopped exit code,
    # and the JobSet ignores that reason
    rules = [r for r in job_spec["podFailurePolicy"]["rules"] if r["action"] == "FailJob"]
    on_disruption = any(c["type"] == "DisruptionTarget" for r in rules for c in r.get("onPodConditions", [])) \
        and any(jobs.STOPPED_EXIT in r["onExitCodes"]["values"] for r in rules if "onExitCodes" in r)
    ignored = any(r["action"] == "RestartJobSetAndIgnoreMaxRestarts" and
                  "PodFailurePolicy" in r["onJobFailureReasons"] for r in policy["rules"])
    pods = Pods([command] * trainer["numNodes"], envs, restart="gang",
                max_restarts=policy["maxRestarts"], free_disruptions=on_disruption and ignored,
                on_line=on_line)
    pods.run(timeout=240)
    return pods


def test_the_trainjob_survives_a_crash_and_a_preemption(tmp_path, reference):
    crash = small_job(tmp_path / "crash", "--crash-at", str(AT))
    pods = run_trainjob(crash)
    assert "every pod recreated" in pods.events and "crashed after step 6" in drill_note(crash)
    assert resumed(pods.output, 4) and result(crash)["digest"] == reference, pods.tail()
    assert not leftovers()

    preempted = small_job(tmp_path / "preempt", "--hold-at", str(AT))
    pods = run_trainjob(preempted, on_line=evict_when_holding(1))
    assert "SIGTERM to pod 1" in pods.events and "every pod recreated" in pods.events, pods.tail()
    # whichever pod the JobSet sees fail first (the evicted one, or one whose workers stopped
    # with it and exited 75), the restart is free
    assert any(e.endswith("was disrupted: no restart counted") for e in pods.events) and pods.restarts == 0
    assert f"stopped by a signal after step {AT}" in drill_note(preempted)
    assert resumed(pods.output, AT) and result(preempted)["digest"] == reference, pods.tail()
    assert not leftovers()


# ------------------------------------------------------------------ the training script's parts
# (the whole script runs under torchrun in the tests below and in test_distributed.py)

def _model_and_opt(seed: int):
    import torch
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def test_the_saver_keeps_the_previous_checkpoint_and_a_resume_falls_back_to_it(tmp_path):
    """Rank 0 writes in a thread and keeps the checkpoint before the newest; a newest file that
    cannot be read is left alone and the previous one is resumed from, on every rank."""
    from torchhw.distributed import train as script

    path = tmp_path / "job.pt"
    saver = script.Saver(path)
    model, opt = _model_and_opt(0)
    for step in (10, 20, 30):
        saver.save(model, opt, step)
    saver.wait()
    assert script.saved_step(path) == 30 and script.saved_step(script.previous(path)) == 20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.prev.pt", "job.pt"]
    assert script.newest_step(path) == 30
    path.write_bytes(path.read_bytes()[:300])            # the newest is damaged
    damaged = path.read_bytes()
    assert script.newest_step(path) == 20
    fresh, fresh_opt = _model_and_opt(1)
    script.load_agreed(path, 20, fresh, fresh_opt, script.torch.device("cpu"), rank=3, wait_s=0)
    assert all(script.torch.equal(a, b) for a, b in zip(fresh.parameters(), model.parameters()))
    assert path.read_bytes() == damaged
    with pytest.raises(RuntimeError, match=r"rank 3 sees steps \[None, 20\].*resumes from step 30"):
        script.load_agreed(path, 30, fresh, fresh_opt, script.torch.device("cpu"), rank=3, wait_s=0)
    restarted = script.Saver(path)                       # the next run, resumed from step 20
    restarted.tidy()
    restarted.save(fresh, fresh_opt, 25)
    restarted.wait()                                     # the damaged file is not kept over step 20
    assert script.saved_step(path) == 25 and script.saved_step(script.previous(path)) == 20
    assert script.newest_step(tmp_path / "none.pt") == 0
    # a checkpoint remembers what decides the data order; a resume with other values is refused
    saver.save(model, opt, 40, seed=0, global_batch=64)
    saver.wait()
    script.load_agreed(path, 40, fresh, fresh_opt, script.torch.device("cpu"), rank=0, wait_s=0,
                       seed=0, global_batch=64)
    with pytest.raises(ValueError, match=r"saved by a run with \{'seed': 0, 'global_batch': 64\}.*new name"):
        script.load_agreed(path, 40, fresh, fresh_opt, script.torch.device("cpu"), rank=0, wait_s=0,
                           seed=0, global_batch=128)


def test_a_failed_write_is_raised_and_a_cut_write_is_tidied(tmp_path, monkeypatch):
    from torchhw.distributed import train as script

    path = tmp_path / "job.pt"
    saver = script.Saver(path)
    model, opt = _model_and_opt(0)
    saver.save(model, opt, 1)
    saver.wait()

    def full(*args, **kwargs):
        raise OSError("No space left on device")
    monkeypatch.setattr(script.checkpoint, "write", full)
    saver.save(model, opt, 2)
    with pytest.raises(RuntimeError, match="writing the checkpoint .*job.pt failed: No space left"):
        saver.wait()
    (tmp_path / ".job.pt.abc.tmp").write_bytes(b"half")  # what a crash mid-write leaves
    saver.tidy()
    assert script.saved_step(path) == 1 and not list(tmp_path.glob(".*"))


def test_the_data_order_and_the_dropout_seeds_depend_on_nothing_a_resume_loses():
    from torchhw.distributed import train as script

    world, per_rank, n = 4, 16, 1024
    for step in (0, 5, 16, 37):
        parts = [script.rows(0, step, world * per_rank, n, r, per_rank) for r in range(world)]
        together = script.torch.cat(parts)
        assert len(set(together.tolist())) == world * per_rank   # the ranks share no row
        script.epoch_order.cache_clear()                          # as after a restart
        assert script.torch.equal(script.rows(0, step, world * per_rank, n, 2, per_rank), parts[2])
    epoch = script.torch.cat([script.rows(0, s, 64, n, 0, 64) for s in range(n // 64)])
    assert sorted(epoch.tolist()) == list(range(n))              # an epoch visits every row once
    assert not script.torch.equal(script.rows(0, 0, 64, n, 0, 64), script.rows(0, 16, 64, n, 0, 64))
    seeds = {script.step_seed(0, r, s) for r in range(8) for s in range(100)}
    assert len(seeds) == 800


def test_a_stop_that_would_outlast_its_grace_is_warned_of(monkeypatch):
    from torchhw.distributed import train as script

    monkeypatch.setenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "10")
    clock = iter([0.0, 2.0, 4.0, 6.0])
    monkeypatch.setattr(script.time, "monotonic", lambda: next(clock))
    saver = script.Saver(Path("unused.pt"))
    check = script.GraceCheck(check_every=10)
    saver.seconds = 1.0
    assert check(saver) == "" and check(saver) == ""     # 2 s between checks + 1 s to save: fine
    saver.seconds = 7.0                                  # 2 + 7 s > 80% of 10 s
    text = check(saver)
    assert "may need 9 s (10 steps, then a checkpoint of 7 s)" in text and "stop_grace_s" in text
    assert check(saver) == ""                            # once


WATCHDOG = """
import os, signal, sys, time
from torchhw.distributed import train
flag = train.StopFlag()
flag.expect(longest_between_checks_s=0.1, save_s=0.0, grace_s=30)   # wait at least 5 s
assert flag.wait_s == 5.0
flag.wait_s = 0.3
os.kill(os.getpid(), signal.SIGTERM)
if sys.argv[1] == "reached":
    flag.acknowledged = True        # the loop reached its check: it saves, nothing gives up
time.sleep(2)
print("lived")
"""


@pytest.mark.parametrize("case", ["stuck", "reached"])
def test_a_worker_that_cannot_reach_its_stop_check_exits_without_waiting_out_the_grace(case):
    """torchrun restarts workers with SIGTERM; one stuck in a collective with a dead peer would
    otherwise hold its node for the whole grace before the SIGKILL, at every restart."""
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", WATCHDOG, case], capture_output=True, text=True,
                          timeout=60)
    if case == "stuck":
        assert done.returncode == 128 + signal.SIGTERM, done.stderr
        assert "no stop check reached" in done.stdout + done.stderr
        assert time.monotonic() - start < 10
    else:
        assert done.returncode == 0 and "lived" in done.stdout, done.stderr


def test_the_slurm_script_ends_a_job_that_stalls_but_not_one_that_progresses(tmp_path):
    """A job that never gets on (a hang before its first checkpoint, a stall) would otherwise
    be requeued at every notice for ever, holding its nodes; one that saves a newer checkpoint
    each time goes on however often it is requeued."""
    script = jobs.slurm_script(jobs.Job("x", max_stalls=2))
    finish = re.search(r"^finish\(\) \{.*?^\}$", script, re.S | re.M).group(0)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n")
    (bin_dir / "scontrol").chmod(0o755)
    marker = tmp_path / "stopped"

    def run(text):
        marker.write_text(text)
        calls.write_text("")
        test = f"stopped={marker}; noticed=1; max_stalls=2; SLURM_JOB_ID=7\n{finish}\nfinish 1\n"
        done = subprocess.run(["bash", "-c", test], capture_output=True, text=True, timeout=30,
                              env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
        return done.returncode, calls.read_text() == "requeue 7\n", done.stdout

    for step in (40, 80, 120, 160):                      # progress: requeued every time
        assert run(f"stopped with the checkpoint of step {step}\n")[:2] == (0, True)
    assert run("stopped with the checkpoint of step 160\n")[:2] == (0, True)   # one stall
    code, requeued, out = run("stopped by the notice, without a new checkpoint\n")
    assert (code, requeued) == (1, False) and "2 requeues in a row" in out and "max_stalls" in out
    assert run("stopped with the checkpoint of step 200\n")[:2] == (0, True)   # progress again


def test_the_notice_leaves_time_for_the_grace_and_the_marker_wait():
    with pytest.raises(ValueError, match="wait for the stop marker"):
        jobs.Job("x", notice_s=120, stop_grace_s=100)   # 100 + 30 s of looking for the marker
    jobs.Job("x", notice_s=120, stop_grace_s=80)
    script = jobs.slurm_script(jobs.Job("x"))
    assert "export TORCH_NCCL_DUMP_ON_TIMEOUT=1" in script
    # the flight recorder's files go with the logs on shared storage, not to each node's /tmp
    assert '\nexport TORCH_FR_DUMP_TEMP_FILE="$PWD/logs/$SLURM_JOB_ID/nccl_trace_rank_"' in script
    assert "hostname -i)" not in script   # 127.0.1.1 on many systems: never suggested


def test_the_gang_scheduler_is_named_or_left_out_and_gpu_pods_tolerate_the_taint():
    gpu = jobs.Job("x", gpus_per_node=8, image="localhost:5000/digits@sha256:" + "0" * 64)
    for manifest in (jobs.pytorchjob_yaml(gpu), jobs.trainjob_yaml(gpu)):
        assert "schedulerName: scheduler-plugins-scheduler" in manifest
        assert "key: nvidia.com/gpu" in manifest and "Pending" in manifest.split("\n\n")[0]
    plain = jobs.Job("x", gang_scheduler=None, image="localhost:5000/digits@sha256:" + "0" * 64)
    for manifest in (jobs.pytorchjob_yaml(plain), jobs.trainjob_yaml(plain)):
        body = "\n".join(l for l in manifest.splitlines() if not l.startswith("#"))
        assert "schedulerName" not in body and "schedulingPolicy" not in body
        assert "coscheduling" not in body and "tolerations" not in body


BLOCKED = """
import os, signal, threading
# what train.py does when run as a program: SIGTERM blocked before torch starts any thread
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
from datetime import timedelta
import torch.distributed as dist
from torchhw.distributed import train
train._WAITER.append(threading.Thread(target=train._take_stop_signals, daemon=True))
train._WAITER[0].start()
flag = train.StopFlag()
flag.wait_s = 0.5
store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=60), wait_for_workers=False)
os.kill(os.getpid(), signal.SIGTERM)
store.get("a key nobody sets")   # blocked in C++, as a rank waiting for a dead peer is
print("returned")
"""


def test_the_stop_signal_is_taken_while_the_main_thread_is_blocked_in_cpp():
    """A Python signal handler would run only once the blocking call returned (60 s here); the
    stop-signal thread takes SIGTERM at once, and the worker gives up after its wait."""
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", BLOCKED], capture_output=True, text=True, timeout=90)
    assert done.returncode == 128 + signal.SIGTERM, done.stdout + done.stderr
    assert "no stop check reached" in done.stdout + done.stderr
    assert time.monotonic() - start < 20 and "returned" not in done.stdout


def test_the_give_up_wait_follows_the_checks_up_to_the_stop_grace(monkeypatch):
    """A worker waits for its next stop check about twice the time between checks plus a save,
    up to the grace torchrun gives after a scheduler's SIGTERM (TORCH_ELASTIC_SHUTDOWN_TIMEOUT)
    less a second: a shorter cap would give up on stops that had time to save. On a restart
    torchrun's own SIGKILL at RESTART_GRACE_S ends a longer wait."""
    from torchhw.distributed import train as script

    monkeypatch.setenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "120")
    flag = script.StopFlag()
    assert flag.wait_s == 119
    flag.expect(longest_between_checks_s=20, save_s=10, grace_s=120)   # 50 s wanted
    assert flag.wait_s == 50 > script.RESTART_GRACE_S
    flag.expect(longest_between_checks_s=70, save_s=10, grace_s=120)   # 150 s wanted
    assert flag.wait_s == 119
    flag.expect(longest_between_checks_s=0.1, save_s=0.0, grace_s=120)
    assert flag.wait_s == 5
    monkeypatch.setenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "10")
    assert script.StopFlag().wait_s == 9


EARLY = """
import os, signal, sys, threading, time
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
from torchhw.distributed import train
train._WAITER.append(threading.Thread(target=train._take_stop_signals, daemon=True))
train._WAITER[0].start()
os.kill(os.getpid(), signal.SIGTERM)        # while "importing": before any StopFlag exists
time.sleep(0.3)
os.environ["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = "2"
flag = train.StopFlag()                     # the clock starts now: 1 s
time.sleep(5)                               # stuck, never reaching a stop check
print("lived")
"""


def test_a_stop_signal_before_the_loop_starts_the_give_up_clock_too():
    done = subprocess.run([sys.executable, "-c", EARLY], capture_output=True, text=True, timeout=60)
    assert done.returncode == 128 + signal.SIGTERM, done.stdout + done.stderr
    assert "lived" not in done.stdout


def test_forked_children_get_the_stop_signal_back():
    """The script blocks SIGTERM for its sigwait thread; a forked child (a DataLoader worker)
    must not inherit that, or it could never be stopped by it."""
    code = (
        "import os, signal\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
        "from torchhw.distributed import train\n"
        "os.register_at_fork(after_in_child=train._unblock_stop_signals)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    blocked = signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, set())\n"
        "    os._exit(1 if blocked else 0)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "assert os.waitstatus_to_exitcode(status) == 0, 'the child still blocks SIGTERM'\n"
        "assert signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, set())  # the parent does\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    source = Path(jobs.__file__).with_name("train.py").read_text()
    assert "os.register_at_fork(after_in_child=_unblock_stop_signals)" in source
