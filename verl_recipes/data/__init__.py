"""Data preparation: `python -m verl_recipes.data.prepare DATASET` writes verl parquet files (see README.md here)."""
