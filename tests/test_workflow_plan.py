"""The workflow's plan (dgno.workflow.plan / settings) on the real configs, without Snakemake: which
training an evaluation uses, whose restored images are kept, what the report needs; and that
building the DAG imports no torch."""

from __future__ import annotations

import copy
import re
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT, patient

from dgno.workflow import plan, settings, targets
from dgno.workflow.config import load_config, validate_config

CONFIGS = {"demo": ROOT / "config.yaml", "smoke": ROOT / "tests" / "smoke.yaml", "paper": ROOT / "config" / "paper.yaml"}


@pytest.fixture(scope="module")
def cfg():
    return {name: load_config(path) for name, path in CONFIGS.items()}


def _smoke_with_face_grid(**datasets_extra) -> dict:
    """The smoke config with a flux grid of DGNO-Face on `nuclei`, and the authors' DGNO-Face weights
    listed first among the methods (same model, no overrides: the same network, but not a training)."""
    raw = yaml.safe_load((ROOT / "tests" / "smoke.yaml").read_text())
    raw["methods"] = {"dgno-face-authors": {"model": "dgno-face", "authors_checkpoints": {"nuclei": "DGNO_X"}}, **raw["methods"]}
    raw["ablations"] = {"flux_boundary": {"dataset": "nuclei", "variants": ["dgno-face"], "flux": ["avg_jump", "jump"], "boundary": ["dirichlet"]}}
    raw["datasets"]["nuclei"].update(datasets_extra)
    return validate_config(raw)


# --- trainings ---------------------------------------------------------------------------------


def test_grid_point_with_a_configured_methods_settings_reuses_its_training(cfg):
    paper = cfg["paper"]
    for point, method in [
        ("dgno-face/flux=avg_jump/boundary=dirichlet", "dgno-face"),
        ("dgno-cell/flux=jump/boundary=neumann", "dgno-cell"),
        ("dgno-face/tau=learnable", "dgno-face"),
        ("dgno-cell/element_size=8/T=2", "dgno-cell"),
    ]:
        assert plan.training_of(paper, "bbbc006_w1", point) == method, point
        assert plan.trained_model(paper, "bbbc006_w1", point) == f"results/train/bbbc006_w1/{method}/model.pt"
    for new in ("dgno-face/flux=avg_jump/boundary=neumann", "dgno-face/tau=0.5", "dgno-cell/element_size=16/T=3"):
        assert plan.training_of(paper, "bbbc006_w1", new) == new  # a setting of its own trains
    assert plan.training_of(paper, "bbbc006_w1", "dgno-face") == "dgno-face"


def test_reuse_never_picks_imported_weights_and_follows_the_datasets_overrides():
    cfg = _smoke_with_face_grid()
    assert plan.training_of(cfg, "nuclei", "dgno-face/flux=avg_jump/boundary=dirichlet") == "dgno-face"
    assert plan.training_of(cfg, "nuclei", "dgno-face/flux=jump/boundary=dirichlet") == "dgno-face/flux=jump/boundary=dirichlet"
    # on this dataset DGNO-Face is configured with the jump flux: now that grid point is its network
    cfg = _smoke_with_face_grid(method_overrides={"dgno-face": {"flux": "jump"}})
    assert plan.training_of(cfg, "nuclei", "dgno-face/flux=jump/boundary=dirichlet") == "dgno-face"
    assert plan.training_of(cfg, "nuclei", "dgno-face/flux=avg_jump/boundary=dirichlet") == "dgno-face/flux=avg_jump/boundary=dirichlet"


def test_checkpoints_come_from_trained_on_and_authors_weights(cfg):
    paper = cfg["paper"]
    assert plan.trained_model(paper, "realdof", "dgno-face") == "results/train/dpdd/dgno-face/model.pt"
    assert plan.trained_model(paper, "bbbc006_w2", "dgno-face-authors") == "results/authors/bbbc006_w2/dgno-face-authors/model.pt"
    assert plan.authors_checkpoint_file(paper, "bbbc006_w2", "dgno-face-authors") == "resources/authors/DGNO_BBBC006_w2_Face.pth"
    with pytest.raises(ValueError, match=r"no authors' checkpoint for dataset dpdd.*Fix: add it under methods\.dgno-face-authors\.authors_checkpoints"):
        plan.authors_checkpoint_file(paper, "dpdd", "dgno-face-authors")
    cached = []
    plan.trained_model(paper, "bbbc006_w1", "dgno-face/tau=learnable", trainings=lambda d, m: cached.append((d, m)) or "x")
    assert cached == [("bbbc006_w1", "dgno-face/tau=learnable")]


# --- restored images and the files each job reads ----------------------------------------------


def test_restored_images_are_kept_exactly_for_the_rules_that_read_them(cfg):
    """Edge band / error difference (experiment methods at the table levels), the visual comparison
    (its rows, deconvolution included, at the first table level) and StarDist; not the blurred input,
    not the robustness set (table only), not an ablation grid point."""
    assert plan.restored_readers(cfg["smoke"]) == {
        *{("nuclei", m, "z02") for m in ("gg", "lg", "dgno-face", "dgno-cell")},
        *{("nuclei_seidel", m, "seidel") for m in ("dgno-cell", "wiener", "richardson_lucy", "ring")},
        *{(ds, m, "sigma") for ds in ("nuclei_sigma", "shapes_narrow") for m in ("gg", "dgno-cell")},
    }
    paper = plan.restored_readers(cfg["paper"])
    assert not [m for _, m, _ in paper if "=" in m or m == "input"]
    stardist = plan.stardist_inputs(cfg["paper"])["restored"]
    assert {("bbbc006_w1", p.split("/")[3], "z02") for p in stardist} <= paper
    assert ("bbbc006_w1", "dgno-cell", "z06") in paper and ("bbbc006_w1", "dgno-cell", "z01") not in paper  # z01: not trained on


def test_data_inputs_name_the_prepared_files(cfg):
    smoke, paper = cfg["smoke"], cfg["paper"]
    assert plan.data_inputs(smoke, "nuclei", ["z02", "z10"])["blur"] == ["results/data/nuclei/blur/z02", "results/data/nuclei/blur/z10"]
    assert plan.data_inputs(paper, "bbbc006_w1", ["z02"])["blur"] == ["results/data/bbbc006_w1/manifest.json"]  # one prepare job
    assert plan.bbbc006_planes(paper, "bbbc006_w1")["planes"][0] == "resources/bbbc006/z16"
    assert plan.seidel_base_inputs(smoke, "nuclei_seidel") == {"split": "results/data/nuclei/split.csv", "gt": "results/data/nuclei/gt"}
    assert plan.sensitivity_inputs(smoke, "nuclei_seidel")["models"] == ["results/train/nuclei_seidel/dgno-cell/model.pt"]
    assert plan.rank_inputs(smoke, "nuclei")["models"] == [f"results/train/nuclei/{m}/model.pt" for m in ("gg", "lg", "dgno-face", "dgno-cell")]
    # the paper's rank analysis leaves out the authors' imported weights (no training of ours to analyse)
    assert plan.rank_methods(paper, "bbbc006_w1") and not [m for m in plan.rank_methods(paper, "bbbc006_w1") if "authors" in m]


def test_names_and_wildcard_regexes(cfg):
    assert re.fullmatch(plan.one_of([]), "") is None and re.fullmatch(plan.one_of([]), "x") is None
    assert re.fullmatch(plan.one_of(["a.b"]), "aXb") is None and re.fullmatch(plan.one_of(["a.b", "c"]), "a.b")
    regex = plan.method_regex(cfg["paper"]["methods"])
    assert re.fullmatch(regex, "dgno-cell/flux=jump/boundary=neumann") and not re.fullmatch(regex, "dgno-cel")
    assert plan.generated_datasets(cfg["smoke"]) == ["nuclei", "nuclei_ood", "shapes_narrow"]
    assert plan.paired_datasets(cfg["paper"]) == ["3dhistech", "dpdd", "realdof"]
    assert plan.summaries("d", ["m"], ["a", "b"]) == [f"results/eval/d/{m}/{lvl}/summary.json" for m in ("m", "input") for lvl in "ab"]


# --- what the report needs ---------------------------------------------------------------------


def test_report_targets_of_the_smoke_config(cfg):
    files = targets.report_inputs(cfg["smoke"])
    assert len(files) == len(set(files))
    assert {"results/tables/operators.csv", "results/tables/robustness.csv", "results/tables/stardist_nuclei.csv",
            "results/figures/nonblind_sensitivity_nuclei_seidel.png", "results/figures/error_difference_nuclei.png"} <= set(files)  # fmt: skip
    assert "results/tables/main.csv" not in files and not [f for f in files if "ablation_" in f]  # not configured
    assert not [f for f in files if "nuclei_ood" in f]  # the robustness set has its table only
    assert "results/tables/edge_band_nuclei_seidel.csv" not in files  # the non-blind set has its own figures
    analysis = targets.analysis_report_inputs(cfg["smoke"])
    assert "results/tables/lam_nuclei.csv" in analysis and "results/figures/effective_rank_nuclei.png" in analysis
    assert "results/figures/psnr_vs_params.png" not in analysis and "results/figures/runtime_memory.png" not in analysis
    assert "results/figures/runtime_memory.png" in targets.analysis_report_inputs(cfg["smoke"], ["benchmarks/results/a.json"])


def test_report_targets_of_the_demo_and_paper_configs(cfg):
    demo = targets.report_inputs(cfg["demo"])
    assert {"results/tables/main.csv", "results/tables/defocus.csv", "results/figures/visual_shapes_wide.png"} <= set(demo)
    assert "results/figures/psnr_vs_params.png" in targets.analysis_report_inputs(cfg["demo"])
    paper = targets.report_inputs(cfg["paper"])
    assert len(paper) == len(set(paper))
    assert {f"results/tables/ablation_{a}.csv" for a in ("flux_boundary", "penalty", "element_size_T")} <= set(paper)
    assert {"results/tables/main.csv", "results/tables/lifting.csv", "results/tables/stardist_bbbc006_w1.csv"} <= set(paper)
    assert {"results/tables/realdof.csv", "results/tables/realdof_stats.csv"} <= set(paper)
    assert "results/eval/realdof/dgno-face/real/summary.json" in plan.table_summaries(cfg["paper"], "realdof")
    assert "results/figures/training_curves_realdof.png" not in paper  # evaluated with the DPDD models
    assert "results/figures/error_difference_bbbc006_w2.png" not in paper  # no GG method on w2
    assert "results/tables/lam_bbbc006_w1.csv" in targets.analysis_report_inputs(cfg["paper"])


def test_experiment_summaries_cover_methods_levels_and_the_input_row(cfg):
    files = plan.experiment_summaries(cfg["smoke"], "operators")
    assert files == [f"results/eval/nuclei/{m}/z02/summary.json" for m in ("gg", "lg", "dgno-face", "dgno-cell", "input")]
    nonblind = plan.experiment_summaries(cfg["smoke"], "nonblind")
    assert "results/eval/nuclei_seidel/ring/seidel/summary.json" in nonblind
    robust = plan.table_summaries(cfg["smoke"], "robustness")
    assert {f.split("/")[2] for f in robust} == {"nuclei", "nuclei_ood"}
    assert plan.table_summaries(cfg["smoke"], "operators") == files


# --- job settings ------------------------------------------------------------------------------


def test_method_settings_add_the_datasets_overrides_and_drop_the_label(cfg):
    paper = cfg["paper"]
    w2 = settings.method_settings(paper, "bbbc006_w2", "dgno-face")
    assert w2["overrides"] == {"flux": "jump", "boundary": "neumann"} and "label" not in w2
    assert "overrides" not in settings.method_settings(paper, "bbbc006_w1", "dgno-face")


def test_train_settings_dataset_recipe_wins_and_prefetch_never_retrains(cfg):
    paper = copy.deepcopy(cfg["paper"])
    hist = settings.train_settings(paper, "3dhistech")
    assert hist["progressive"] == paper["datasets"]["3dhistech"]["train"]["progressive"]
    paper["train"]["prefetch"] = 7
    assert "prefetch" not in settings.train_settings(paper, "bbbc006_w1")
    assert list(settings.canonical({"b": 1, "a": {"d": 1, "c": 2}})) == ["a", "b"]


# --- the DAG without torch ---------------------------------------------------------------------

# Runs `snakemake -n` in this process with every `import torch` failing, then reports whether any
# dgno module that builds networks was loaded.
_NO_TORCH = r"""
import importlib.abc, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "torch":
            raise ImportError("building the DAG must not import torch")
sys.meta_path.insert(0, NoTorch())
import snakemake.cli
try:
    snakemake.cli.main(sys.argv[1:])
except SystemExit as exit:
    loaded = sorted(m for m in sys.modules if m.startswith(("dgno.models.baselines", "dgno.models.dgno", "torch")))
    print("LOADED", loaded, file=sys.stderr)
    raise
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", ["demo", "paper"])
def test_building_the_dag_imports_no_torch(name, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", _NO_TORCH, "-n", "--snakefile", str(ROOT / "Snakefile"),
         "--directory", str(tmp_path), "--configfile", str(CONFIGS[name])],
        capture_output=True, text=True, timeout=patient(300),
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "LOADED []" in out, out[-3000:]
    assert re.search(r"^train\s+\d+$", out, re.M) and re.search(r"^evaluate\s+\d+$", out, re.M), out[-3000:]  # the DAG was built


# --- seed replicates ---------------------------------------------------------------------------


def test_seed_replicates_are_paths_of_their_own_and_tables_read_their_experiments_seeds(cfg):
    from dgno.workflow import replicates

    demo = cfg["demo"]
    assert demo["experiments"]["operators"]["seeds"] == 2 and demo["experiments"]["main"]["seeds"] == 1
    operators = plan.experiment_summaries(demo, "operators")
    assert "results/eval/nuclei/gg/z02/summary.json" in operators and "results/eval/nuclei/gg/seed=1/z02/summary.json" in operators
    assert not [f for f in operators if "input/seed=" in f]  # the blurred input has no replicates: one evaluation serves every seed
    assert not [f for f in plan.experiment_summaries(demo, "main") if "seed=" in f]  # Table 1 reads replicate 0 only
    assert plan.trained_model(demo, "nuclei", "gg", replicate=1) == "results/train/nuclei/gg/seed=1/model.pt"
    assert replicates.training_seed(demo, 0) == demo["seed"] and replicates.training_seed(demo, 1) == demo["seed"] + 1
    assert plan.edge_band_replicates(demo, "nuclei")["gg"] == [0, 1] and plan.edge_band_replicates(demo, "nuclei")["nafnet"] == [0]
    assert "results/train/nuclei/dgno-cell/seed=1/train_metrics.csv" in plan.training_curves(demo, "nuclei")
    with pytest.raises(ValueError, match="authors' weights"):
        plan.trained_model(cfg["paper"], "bbbc006_w1", "dgno-cell-authors", replicate=1)


def test_one_replicate_is_a_target_that_trains_only_itself(tmp_path):
    """snakemake -n on one replicate's evaluation: its own training (seed + 1, in seed=1/) and evaluation,
    and not replicate 0's training."""
    from dgno.workflow.estimate import parse_dry_run

    target = "results/eval/shapes_narrow/gg/seed=1/sigma/summary.json"
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", target, "-n", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
         "--configfile", str(CONFIGS["smoke"])],
        capture_output=True, text=True, timeout=patient(300),
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    jobs = parse_dry_run(proc.stdout + proc.stderr)
    trains = [(j.rule, j.wildcards) for j in jobs if j.rule.startswith("train")]
    assert trains == [("train_replicate", {"dataset": "shapes_narrow", "method": "gg", "replicate": "1"})]
    assert [j.rule for j in jobs if j.rule.startswith("evaluate")] == ["evaluate_replicate"]
    assert "results/train/shapes_narrow/gg/seed=1/model.pt" in proc.stdout
