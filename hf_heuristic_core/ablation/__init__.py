"""What replaces a pruned value: zero, mean or resample ablation, and the mean activations mean ablation needs."""
