"""One job description, two schedulers: the Slurm script and the PyTorchJob are checked by
running them. The Slurm script runs under stand-ins for srun and scontrol (tests/slurm_standin)
that start one torchrun agent per node on 127.0.0.1 with the SLURM_* variables; the PyTorchJob
validates against the Kubeflow training operator's models and its container command runs once
per replica with the PET_* variables the operator sets. Both survive an injected crash."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from torchhw import agents, jobs
from torchhw.distributed import free_port

from conftest import leftovers

HERE = Path(__file__).parent
FIXTURES = str(HERE / "fixtures_distributed.py")
STANDIN = HERE / "slurm_standin"


@pytest.fixture(params=[dict(nodes=2, gpus_per_node=4), dict(nodes=3, cpus_per_proc=8), dict(nodes=1)])
def job(request):
    return jobs.Job("digits-ddp", args=["train", "--steps", "100"], **request.param)


def test_slurm_script_matches_the_job(job):
    script = jobs.slurm_script(job)
    assert script.startswith("#!/bin/bash\n")
    assert f"#SBATCH --nodes={job.nodes}\n" in script
    assert f"#SBATCH --cpus-per-task={job.cpus_per_proc * job.procs_per_node}\n" in script
    assert (f"#SBATCH --gpus-per-node={job.gpus_per_node}" in script) == bool(job.gpus_per_node)
    assert "#SBATCH --requeue" in script and "--signal=B:USR1@" in script
    assert 'srun --cpus-per-task="$SLURM_CPUS_PER_TASK" --kill-on-bad-exit=1' in script
    assert "source /shared/venv/bin/activate" in script
    assert f"--nnodes={job.nodes}" in script and "--rdzv-backend=c10d" in script


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
    assert spec["runPolicy"]["backoffLimit"] == job.max_restarts
    pod = spec["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    assert "persistentVolumeClaim" in volumes[mounts[job.shared_dir]]
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits["cpu"] == str(job.cpus_per_node) and limits.get("nvidia.com/gpu", "0") == str(job.gpus_per_node)


def test_a_misspelt_field_is_caught():
    manifest = jobs.pytorchjob(jobs.Job("x"))
    manifest["spec"]["elasticPolicy"]["rdzvBackedn"] = "c10d"
    assert kubeflow_round_trip(manifest) != manifest


def test_bad_jobs_are_refused():
    with pytest.raises(ValueError, match="one GPU per process"):
        jobs.Job("x", gpus_per_node=2, procs_per_node=4)
    with pytest.raises(ValueError, match="lower-case"):
        jobs.Job("My_Job")


# --------------------------------------------------------------------------- run them

def small_job(tmp_path, crash: bool) -> jobs.Job:
    args = ["train", "--steps", "8", "--every", "4", "--checkpoint", str(tmp_path / "ckpt.pt"),
            "--out", str(tmp_path / "result.json")]
    if crash:
        args += ["--crash-at", "5", "--crash-node", "1", "--crash-marker", str(tmp_path / "crashed")]
    venv = Path(sys.executable).parent
    return jobs.Job("small", script=FIXTURES, args=args, nodes=2, cpus_per_proc=1, max_restarts=1,
                    setup=[f'export PATH="{venv}:$PATH"'])


def run_slurm_script(job: jobs.Job, folder: Path) -> subprocess.CompletedProcess:
    script = folder / "job.sbatch"
    script.write_text(jobs.slurm_script(job))
    env = dict(os.environ, PATH=f"{STANDIN}:{os.environ['PATH']}", SLURM_JOB_ID=str(free_port()),
               SLURM_JOB_NODELIST="node[0-1]", SLURM_NNODES="2", SLURM_CPUS_PER_TASK="1",
               SLURM_JOB_NAME=job.name)
    return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=180)


def run_pytorchjob(job: jobs.Job) -> list[agents.RunResult]:
    manifest = jobs.pytorchjob(job)
    worker = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]
    command = worker["template"]["spec"]["containers"][0]["command"]
    assert command[0] == "torchrun"
    launcher = [sys.executable, "-m", "torch.distributed.run"]
    env = jobs.operator_env(job, f"127.0.0.1:{free_port()}")
    return agents.run_agents([launcher + command[1:]] * worker["replicas"],
                             envs=[env] * worker["replicas"], echo=None, timeout=180)


def test_both_cluster_files_run_and_survive_a_crash(tmp_path):
    """Each file runs the same 2-node job, whose second node crashes once after the checkpoint
    at step 4: both must restart, resume from step 4 and end with the same weights.

    That the weights also equal a run without a fault is proven for the same training script
    by test_distributed's 2-node crash case (`make stress`) and, for 08's script, by 08 itself;
    repeating a fault-free run here would cost another torchrun job."""
    digests = {}
    slurm = tmp_path / "slurm"
    slurm.mkdir()
    result = run_slurm_script(small_job(slurm, crash=True), slurm)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert (slurm / "crashed").exists() and "resumed from step 4" in result.stdout
    digests["slurm"] = json.loads((slurm / "result.json").read_text())["digest"]
    assert not leftovers()

    k8s = tmp_path / "pytorchjob"
    k8s.mkdir()
    results = run_pytorchjob(small_job(k8s, crash=True))
    assert all(r.returncode == 0 for r in results), results[0].output[-3000:]
    assert (k8s / "crashed").exists()
    assert "resumed from step 4" in "\n".join(r.output for r in results)
    digests["pytorchjob"] = json.loads((k8s / "result.json").read_text())["digest"]
    assert digests["slurm"] == digests["pytorchjob"], digests
    assert not leftovers()
