"""The MoE grouped MLP library (../shared/SPEC-moe.md), written in the tilefuse DSL."""
