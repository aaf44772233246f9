"""Learning runs: a tiny model of a recipe learns a small task through the recipe itself (make <recipe>-learn)."""
