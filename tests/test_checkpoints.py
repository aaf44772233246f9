"""Which checkpoints count (verl_recipes/runtime/checkpoints.py) and the callback that marks and prunes them after
verl's save (verl_recipes/runtime/checkpoint_marker.py). The launcher's use of both is in tests/test_resume.py."""

import json

from verl_recipes.runtime import checkpoints as ckpt
from verl_recipes.runtime.checkpoint_marker import MarkComplete


def saved(root, step, complete=True, parts=("actor", "data.pt")):
    folder = root / f"global_step_{step}"
    folder.mkdir(parents=True)
    for part in parts:
        (folder / part).mkdir() if "." not in part else (folder / part).write_bytes(b"x")
    if complete:
        ckpt.mark(folder)
    return folder


def test_the_newest_marked_checkpoint_counts_and_newer_unmarked_ones_are_named(tmp_path):
    one, two = saved(tmp_path, 1), saved(tmp_path, 2)
    cut = saved(tmp_path, 3, complete=False, parts=("actor",))  # killed after actor/, before data.pt
    (tmp_path / ckpt.TRACKER).write_text("3")
    assert ckpt.newest_complete(tmp_path) == (two, [cut])
    assert ckpt.newest_complete(tmp_path / "none") == (None, [])
    assert json.loads((one / ckpt.MARKER).read_text()) == {"step": 1, "parts": ["actor", "data.pt"]}
    assert not list(tmp_path.rglob(f".{ckpt.MARKER}.partial"))


def test_before_the_markers_only_a_whole_step_the_tracker_names_counts(tmp_path):
    whole, pruned = saved(tmp_path, 1, complete=False), saved(tmp_path, 2, complete=False, parts=("data.pt",))
    (tmp_path / ckpt.TRACKER).write_text("1")
    assert ckpt.newest_complete(tmp_path) == (whole, [pruned])
    # verl's pruning removed step 2's actor/ when step 3's was written, then the run died: nothing is whole
    (tmp_path / ckpt.TRACKER).write_text("2")
    assert ckpt.newest_complete(tmp_path) == (None, [whole, pruned])


def test_pruning_keeps_the_newest_complete_and_never_the_one_being_written(tmp_path):
    old = [saved(tmp_path, s) for s in (1, 2)]
    stray = saved(tmp_path, 3, complete=False)  # an older cut save
    kept = saved(tmp_path, 4)
    writing = saved(tmp_path, 5, complete=False, parts=("actor",))
    assert ckpt.prune(tmp_path, keep=1) == [*old, stray]
    assert ckpt.saved(tmp_path) == [kept, writing]
    assert ckpt.prune(tmp_path, keep=1) == [] and ckpt.prune(tmp_path, keep=0) == []


def test_the_callback_marks_each_save_and_prunes_to_the_launchs_count(tmp_path, monkeypatch):
    monkeypatch.setenv(ckpt.KEEP_ENV, "2")
    callback = MarkComplete(config=None)
    for step in (1, 2, 3):
        folder = saved(tmp_path, step, complete=False)
        callback.on_save(trainer=None, global_step=step, checkpoint_dir=str(folder))
    assert [f.name for f in ckpt.saved(tmp_path)] == ["global_step_2", "global_step_3"]
    assert all(ckpt.is_complete(f) for f in ckpt.saved(tmp_path))
    # an asynchronous save may still be writing: never marked
    late = saved(tmp_path, 4, complete=False)
    callback.on_save(trainer=None, global_step=4, checkpoint_dir=str(late), async_save=True)
    assert not ckpt.is_complete(late) and len(ckpt.saved(tmp_path)) == 3
