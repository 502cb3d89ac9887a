"""One job description, consistent as a torchrun command, a Slurm script and a PyTorchJob."""

import pytest
import yaml

from torchhw import jobs


@pytest.fixture(params=[dict(nodes=2, gpus_per_node=4), dict(nodes=3, cpus_per_proc=8), dict(nodes=1)])
def job(request):
    return jobs.Job("digits-ddp", args=["train", "--steps", "100"], **request.param)


def test_slurm_script_matches_the_job(job):
    script = jobs.slurm_script(job)
    assert script.startswith("#!/bin/bash\n")
    assert f"#SBATCH --nodes={job.nodes}\n" in script
    assert "#SBATCH --ntasks-per-node=1" in script
    assert f"#SBATCH --cpus-per-task={job.cpus_per_proc * job.procs_per_node}\n" in script
    assert f"#SBATCH --mem={job.memory_gib}G" in script
    assert (f"#SBATCH --gpus-per-node={job.gpus_per_node}" in script) == bool(job.gpus_per_node)
    run = [l for l in script.splitlines() if l.startswith("srun ")][0]
    assert f"--nnodes={job.nodes}" in run and f"--nproc-per-node={job.procs_per_node}" in run
    assert "--rdzv-endpoint=$head_node:29500" in run and "--rdzv-id=$SLURM_JOB_ID" in run
    assert run.endswith("-m torchhw.workers train --steps 100")


def test_pytorchjob_manifest_parses_and_matches_the_job(job):
    manifest = yaml.safe_load(jobs.pytorchjob_yaml(job))
    assert manifest["apiVersion"] == "kubeflow.org/v1" and manifest["kind"] == "PyTorchJob"
    assert manifest["metadata"]["name"] == "digits-ddp"
    spec = manifest["spec"]
    assert spec["nprocPerNode"] == str(job.procs_per_node)
    replicas = spec["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1
    assert sum(r["replicas"] for r in replicas.values()) == job.nodes
    for r in replicas.values():
        (container,) = r["template"]["spec"]["containers"]
        assert container["name"] == "pytorch" and container["image"]
        limits = container["resources"]["limits"]
        assert limits["cpu"] == str(job.cpus_per_proc * job.procs_per_node)
        assert limits["memory"] == f"{job.memory_gib}Gi"
        assert limits.get("nvidia.com/gpu", 0) == job.gpus_per_node
        cmd = container["command"]
        assert cmd[0] == "torchrun" and f"--nnodes={job.nodes}" in cmd
        assert cmd[-5:] == ["-m", "torchhw.workers", "train", "--steps", "100"]


def test_the_three_forms_run_the_same_command(job):
    tail = jobs.torchrun_args(job, "h:1")[-5:]
    manifest = jobs.pytorchjob(job)
    k8s = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
    assert k8s[-5:] == tail
    assert jobs.slurm_script(job).rstrip().endswith(" ".join(tail))


def test_bad_jobs_are_refused():
    with pytest.raises(ValueError, match="one GPU per process"):
        jobs.Job("x", gpus_per_node=2, procs_per_node=4)
    with pytest.raises(ValueError, match="lower-case"):
        jobs.Job("My_Job")
