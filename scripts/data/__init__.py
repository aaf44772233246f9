"""Data preparation: `python -m scripts.data.prepare DATASET` writes verl parquet files (see README.md here)."""
