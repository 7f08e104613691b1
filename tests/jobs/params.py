"""The job forms behind the golden sbatch files in tests/fixtures/sbatch/."""

from jobs.sbatch import JobParams

TORCHRUN_MULTINODE_RESUME = JobParams(
    job_name="llm-pretrain",
    partition="gpu",
    account="research",
    nodes=2,
    gpus_per_node=8,
    gpu_flag="gres",
    cpus_per_task=16,
    mem="64G",
    time_limit=36 * 60,
    workdir="/scratch/alice/llm",
    env_setup=(
        "module load cuda/12.4",
        "source /scratch/alice/venv/bin/activate",
        "export NCCL_DEBUG=WARN",
    ),
    template="torchrun",
    command="train.py --config configs/7b.yaml --lr 3e-4",
    checkpoint_dir="/scratch/alice/checkpoints/llm-pretrain",
    auto_resume=True,
    signal_grace_s=300,
    output="/scratch/alice/llm/logs/%x-%j.out",
    portal_url="https://medbay.example.org",
    progress_token="job-token.abc123",
)

PYTHON_SINGLE_NODE = JobParams(
    job_name="eval_run.2",
    partition="debug",
    nodes=1,
    gpus_per_node=1,
    gpu_flag="gpus-per-node",
    cpus_per_task=4,
    mem=16000,
    time_limit=90,
    workdir="/home/bob/eval",
    env_setup=("source /home/bob/venv/bin/activate",),
    template="python",
    command="eval.py --split 'val set' --out /home/bob/eval/results.json",
)

CUSTOM_BODY = JobParams(
    job_name="preprocess",
    partition="cpu",
    nodes=1,
    cpus_per_task=8,
    time_limit=3 * 24 * 60 + 30,
    workdir="/data/carol",
    template="custom",
    command=(
        "srun hostname\n"
        "for shard in 0 1 2; do\n"
        '  python prepare.py --shard "$shard" --out "$MEDBAY_CHECKPOINT_DIR"\n'
        "done\n"
    ),
    checkpoint_dir="/data/carol/shards",
)

GOLDEN = {
    "torchrun_multinode_resume.sh": TORCHRUN_MULTINODE_RESUME,
    "python_single_node.sh": PYTHON_SINGLE_NODE,
    "custom_body.sh": CUSTOM_BODY,
}
