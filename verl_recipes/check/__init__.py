"""Every rule we check a recipe against, one module per family."""
