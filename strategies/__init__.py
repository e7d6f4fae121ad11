"""Server halves of each method: transport-agnostic strategies (no Flower imports)."""
