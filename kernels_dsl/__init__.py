"""The kernel library written in the tilefuse DSL."""
