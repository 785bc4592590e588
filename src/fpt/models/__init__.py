"""What trains: the frozen pretrained transformer (transformer), the ends every model shares (ends), the
freeze policies (policy) and the fully trained baselines (baselines)."""
