"""Pure parsers from Slurm's command output to the backend dataclasses.

Two generations of output are understood, told apart by their shape rather than a
version number so that one function serves both:

- Slurm 22.05: `sinfo --json` (a node list: lower-case `state` plus upper-case
  `state_flags`), `squeue --json` (plain integers, raw wait-status exit codes,
  `0` for unset times) and `scontrol -o show ...` text, because 22.05's scontrol
  has no `--json`.
- Slurm 23.02 and later (samples from 24.11): `scontrol show node|job|partition
  --json`, `squeue --json` and `sinfo --json` (grouped by partition and state),
  with upper-case state arrays, `{set, infinite, number}` numbers, exit-code
  objects and 0 or NO_VAL (4294967294) for unset times.

Nothing here runs a command or imports Django.

The parsers live by format and kind: values.py (numbers, times, GRES, node
states), text.py (scontrol text, slurm.conf, config), json_nodes.py and
json_jobs.py (JSON, sacct included), json_accounting.py (sacct's finished
attempts for the accounting import); hostlists and durations are read by
clusters/backends/slurm_syntax.py, which the job launcher shares. Every name is
importable from here.
"""

from clusters.backends.slurm_parsers.json_accounting import (
    AccountingParseError,
    accounting_errors,
    decode_accounting_json,
    parse_accounting_json,
)
from clusters.backends.slurm_parsers.json_jobs import (
    JOB_JSON_KEYS,
    JobListParser,
    decode_jobs_json,
    first_state,
    job_from_json,
    job_from_sacct_json,
    job_time_limit,
    json_exit_code,
    json_job_gpus,
    parse_jobs_json,
    parse_sacct_json,
    sacct_gpus,
    sacct_time_limit,
)
from clusters.backends.slurm_parsers.json_nodes import (
    node_from_json,
    node_from_sinfo_group,
    node_state_tokens,
    nodes_from_sinfo_groups,
    non_negative,
    parse_nodes_json,
    parse_partitions_json,
    partition_from_json,
)
from clusters.backends.slurm_parsers.text import (
    PRIVATE_DATA_KINDS,
    job_from_scontrol_record,
    node_from_scontrol_record,
    parse_private_data,
    parse_scontrol_jobs,
    parse_scontrol_line,
    parse_scontrol_nodes,
    parse_scontrol_partitions,
    parse_scontrol_records,
    parse_slurm_conf_node_addresses,
    parse_slurm_conf_partitions,
    parse_slurm_version,
    parse_squeue_starts,
    partition_from_scontrol_record,
    text_exit_code,
    text_job_gpus,
)
from clusters.backends.slurm_parsers.values import (
    BASE_STATE_ALIASES,
    FLAG_ALIASES,
    GRES_PREFIX,
    GRES_SUFFIX,
    LEADING_INT,
    REASON_STAMP,
    SCONTROL_KEY,
    UNSET_NUMBERS,
    Gres,
    epoch_to_datetime,
    first_int,
    gpu_count,
    gpu_model,
    is_infinite,
    parse_gres,
    plain_number,
    split_node_state,
    text_or_empty,
    text_reason,
    text_time,
    tres_gpus,
)
from clusters.backends.slurm_syntax import (
    HOST_RANGE,
    PARSE_CACHE_SIZE,
    TEXT_NONE_VALUES,
    duration_minutes,
    expand_hostlist,
    expand_one_host_pattern,
    expand_range,
    split_outside_brackets,
    split_top_level,
)

__all__ = [
    "AccountingParseError",
    "accounting_errors",
    "decode_accounting_json",
    "parse_accounting_json",
    "BASE_STATE_ALIASES",
    "FLAG_ALIASES",
    "GRES_PREFIX",
    "GRES_SUFFIX",
    "Gres",
    "HOST_RANGE",
    "JOB_JSON_KEYS",
    "JobListParser",
    "LEADING_INT",
    "PARSE_CACHE_SIZE",
    "PRIVATE_DATA_KINDS",
    "REASON_STAMP",
    "SCONTROL_KEY",
    "TEXT_NONE_VALUES",
    "UNSET_NUMBERS",
    "decode_jobs_json",
    "duration_minutes",
    "epoch_to_datetime",
    "expand_hostlist",
    "expand_one_host_pattern",
    "expand_range",
    "first_int",
    "first_state",
    "gpu_count",
    "gpu_model",
    "is_infinite",
    "job_from_json",
    "job_from_sacct_json",
    "job_from_scontrol_record",
    "job_time_limit",
    "json_exit_code",
    "json_job_gpus",
    "node_from_json",
    "node_from_scontrol_record",
    "node_from_sinfo_group",
    "node_state_tokens",
    "nodes_from_sinfo_groups",
    "non_negative",
    "parse_gres",
    "parse_jobs_json",
    "parse_nodes_json",
    "parse_partitions_json",
    "parse_private_data",
    "parse_sacct_json",
    "parse_scontrol_jobs",
    "parse_scontrol_line",
    "parse_scontrol_nodes",
    "parse_scontrol_partitions",
    "parse_scontrol_records",
    "parse_slurm_conf_node_addresses",
    "parse_slurm_conf_partitions",
    "parse_slurm_version",
    "parse_squeue_starts",
    "partition_from_json",
    "partition_from_scontrol_record",
    "plain_number",
    "sacct_gpus",
    "sacct_time_limit",
    "split_node_state",
    "split_outside_brackets",
    "split_top_level",
    "text_exit_code",
    "text_job_gpus",
    "text_or_empty",
    "text_reason",
    "text_time",
    "tres_gpus",
]
