"""Command-line tools: detect, evaluate, doctor (with its deployment record), demo and its report."""
