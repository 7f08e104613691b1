"""Pure parsers for GPU fault sources: kernel log, nvidia-smi XML, DCGM, NVML."""
