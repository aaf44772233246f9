"""Model classes for an SGLang rollout's own processes, where verl's plugins never load.

SGLang builds its model in a scheduler process it spawns, which imports SGLang but not verl, so a `verl.plugins`
patch (runtime/sglang_pixel_budget.py, runtime/checkpoint_names.py) cannot reach it. SGLang's own extension point
does: it imports every module of the package that SGLANG_EXTERNAL_MODEL_PACKAGE names and lets each module's
EntryClass replace its model class of the same name (sglang 0.5.12, srt/models/registry.py). configs/rollout/sglang
names this package for a run's Ray workers, and the scheduler inherits their environment.
"""
