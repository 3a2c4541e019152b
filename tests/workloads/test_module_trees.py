"""The module calls of a model's code that the zoo graph's op names do not show (``workloads.frameworks.MODULE_TREES``),
counted by hand from the model code, and how a validation row names its tree."""

from __future__ import annotations

import pytest

from simulator.engines.walk import module_call_counts
from workloads.frameworks import (
    EXTRA_MODULE_CALLS_META,
    MODULE_TREES,
    FrameworkError,
    module_tree_of,
    with_module_tree,
)
from workloads.resolve import load_workload


def _graph(name):
    return load_workload(name, batch=1, seq=224, phase="forward", framework="eager")


def _calls(tree, name):
    g = _graph(name)
    return MODULE_TREES[tree][0]([op.name for op in g])


def test_hf_vit_tree_counts_six_calls_a_layer_and_three_above():
    # per ViTLayer: attention dropout, ViTSelfOutput + dropout, GELUActivation, ViTOutput + dropout = 6;
    # above: ViTForImageClassification, ViTModel, the embeddings' dropout = 3; 12 layers: 75
    calls = _calls("transformers ViTForImageClassification", "vit_b16")
    assert sum(calls.values()) == 12 * 6 + 3
    assert calls["layers.5.attn.out"] == 2 and calls["layers.5.mlp.down"] == 2
    assert calls["layers.5.attn.core.pv"] == 1 and calls["layers.5.mlp.act"] == 1
    assert calls["embed.patch"] == 2 and calls["layers.0.attn_norm"] == 1


def test_hf_resnet_tree_counts_bottleneck_and_stem_modules():
    # ResNet-50 (3, 4, 6, 3 bottlenecks): 8 calls in a block with a projection shortcut (4 blocks), 9 with the
    # nn.Identity shortcut (12 blocks), 10 above the stages: 150
    calls = _calls("transformers ResNetForImageClassification", "resnet50")
    assert sum(calls.values()) == 4 * 8 + 12 * 9 + 10
    assert calls["layer1.0.add"] == 1 and calls["layer1.1.add"] == 2  # the Identity shortcut in the second
    assert calls["conv1"] == 4 and calls["fc"] == 2


def test_torchvision_resnet_tree_counts_the_relu_calls():
    # the root module, the stem's ReLU, max and average pooling, and 3 ReLU calls in each of 50 bottlenecks
    assert sum(_calls("torchvision ResNet", "resnet152").values()) == 1 + 1 + 2 + 3 * 50


def test_dle_resnet_tree_adds_the_outer_sequential_to_torchvision_calls():
    # DeepLearningExamples' ResNet @ 291f0d0: the root module, self.layers (the nn.Sequential around the four stages),
    # the stem's ReLU, max and average pooling, and 3 ReLU calls in each of 16 bottlenecks (ResNet-50): 53
    calls = _calls("DeepLearningExamples ResNet", "resnet50")
    assert sum(calls.values()) == 1 + 1 + 1 + 2 + 3 * 16
    assert calls["layer1.0.conv1"] == 1 and calls["conv1"] == 1 and calls["layer4.2.relu_2"] == 1
    assert sum(calls.values()) == sum(_calls("torchvision ResNet", "resnet50").values()) + 1

def test_module_call_counts_adds_the_tree_as_containers():
    g = _graph("vit_b16")
    before = module_call_counts(g)
    after = module_call_counts(with_module_tree(g, "transformers ViTForImageClassification"))
    assert sum(c for c, _ in after.values()) == sum(c for c, _ in before.values()) + 75
    assert sum(p for _, p in after.values()) == sum(p for _, p in before.values())  # parameter modules unchanged
    assert after["layers.3.mlp.down"][0] == before["layers.3.mlp.down"][0] + 2


def test_graph_without_tree_is_unchanged():
    g = _graph("resnet50")
    assert EXTRA_MODULE_CALLS_META not in g.meta


def test_row_notes_name_the_tree():
    assert module_tree_of("... one image. Module tree: torchvision ResNet. Mode: eager.") == "torchvision ResNet"
    assert module_tree_of("no tree named here") is None
    assert module_tree_of(None) is None


def test_unknown_tree_is_one_located_error():
    with pytest.raises(FrameworkError) as exc:
        module_tree_of("Module tree: torchvison ResNet.", "rows.csv:7: notes")
    msg = str(exc.value)
    assert msg.startswith("rows.csv:7: notes: unknown module tree; got 'torchvison ResNet'")
    assert "did you mean 'torchvision ResNet'?" in msg


@pytest.mark.parametrize("notes", ["module tree: torchvison ResNet.", "MODULE TREE:torchvison ResNet. Mode: eager."])
def test_marker_in_any_case_still_checks_the_name(notes):
    with pytest.raises(FrameworkError, match=r"^rows.csv:7: notes: unknown module tree; got 'torchvison ResNet'.*"
                                             r"did you mean 'torchvision ResNet'\?"):
        module_tree_of(notes, "rows.csv:7: notes")
    assert module_tree_of("one image. module tree: torchvision ResNet. Mode: eager.") == "torchvision ResNet"


def test_row_with_misspelt_tree_is_refused_at_load(tmp_path, capsys):
    from simulator.calibration.frameworks_validation import FRAMEWORKS_DATASET
    from simulator.cli.main import main

    lines = FRAMEWORKS_DATASET.read_text(encoding="utf-8").splitlines()
    row = next(ln for ln in lines if ln.startswith("fw-062,"))
    bad = tmp_path / "mine.csv"
    bad.write_text("\n".join([lines[0], row.replace("Module tree: torchvision ResNet.",
                                                    "Module tree: torchvison ResNet.")]) + "\n", encoding="utf-8")
    rc = main(["validate", str(bad), "--dataset", "frameworks"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "mine.csv:2: notes: unknown module tree; got 'torchvison ResNet'" in err
    assert "did you mean 'torchvision ResNet'?" in err


def test_compiled_row_naming_another_models_tree_is_refused_at_load(tmp_path, capsys):
    """fw-063 is a torch.compile row (its costing counts no module calls), yet a tree naming another model's code is
    refused at load, with the row's line."""
    from simulator.calibration.frameworks_validation import FRAMEWORKS_DATASET
    from simulator.cli.main import main

    lines = FRAMEWORKS_DATASET.read_text(encoding="utf-8").splitlines()
    row = next(ln for ln in lines if ln.startswith("fw-063,"))
    assert "Module tree: torchvision ResNet." in row
    bad = tmp_path / "mine.csv"
    bad.write_text("\n".join([lines[0], row.replace("Module tree: torchvision ResNet.",
                                                    "Module tree: transformers ViTForImageClassification.")]) + "\n",
                   encoding="utf-8")
    rc = main(["validate", str(bad), "--dataset", "frameworks"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "mine.csv:2: notes: module tree 'transformers ViTForImageClassification' matches no op of graph" in err


def test_tree_named_for_another_models_graph_is_refused():
    with pytest.raises(FrameworkError, match=r"^rows.csv:3: notes: module tree 'transformers ViTForImageClassification' "
                                             r"matches no op of graph "):
        with_module_tree(_graph("resnet50"), "transformers ViTForImageClassification", "rows.csv:3: notes")
