"""Config validation: typos and unknown names fail before any job runs, naming key and allowed values."""

import copy
from pathlib import Path

import pytest
import yaml
from conftest import patient

from dgno.workflow.config import ConfigError, load_config, validate_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo():
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def test_default_and_smoke_configs_validate():
    for path in (ROOT / "config.yaml", ROOT / "tests" / "smoke.yaml"):
        cfg = load_config(path)
        assert cfg["evaluate"]["edge_band_px"] >= 1  # default filled in


def test_unknown_top_level_key_names_key_and_allowed(demo):
    cfg = copy.deepcopy(demo)
    cfg["trian"] = {}
    with pytest.raises(ConfigError, match=r"trian: unknown key; allowed keys here: .*train"):
        validate_config(cfg)


def test_unknown_flux_names_allowed_values(demo):
    cfg = copy.deepcopy(demo)
    cfg["methods"]["dgno-cell"]["overrides"] = {"flux": "jmp"}
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    msg = str(err.value)
    assert "methods.dgno-cell.overrides.flux" in msg and "'jmp'" in msg
    for allowed in ("central", "jump", "avg_jump", "upwind"):
        assert allowed in msg


def test_unknown_boundary_and_tau(demo):
    cfg = copy.deepcopy(demo)
    cfg["methods"]["dgno-face"]["overrides"] = {"boundary": "mirror"}
    with pytest.raises(ConfigError, match="neumann, dirichlet, periodic"):
        validate_config(cfg)
    cfg["methods"]["dgno-face"]["overrides"] = {"tau": "fixed"}
    with pytest.raises(ConfigError, match="learnable"):
        validate_config(cfg)


def test_nested_typo_in_train(demo):
    cfg = copy.deepcopy(demo)
    cfg["train"]["iteration"] = 5
    with pytest.raises(ConfigError, match=r"train.iteration: unknown key; allowed keys here: .*iterations"):
        validate_config(cfg)


def test_cross_references(demo):
    cfg = copy.deepcopy(demo)
    cfg["experiments"]["operators"]["methods"].append("not-a-method")
    with pytest.raises(ConfigError, match="method 'not-a-method' is not defined"):
        validate_config(cfg)
    cfg = copy.deepcopy(demo)
    cfg["datasets"]["nuclei"]["train_levels"] = ["z99"]
    with pytest.raises(ConfigError, match="level 'z99' is not defined; defined levels: z01"):
        validate_config(cfg)


def test_snakemake_rejects_bad_config_before_running(tmp_path):
    """The workflow itself refuses a bad config at parse time (no job runs)."""
    import subprocess
    import sys

    bad = yaml.safe_load((ROOT / "tests" / "smoke.yaml").read_text())
    bad["methods"]["gg"]["overrides"] = {"boundary": "mirror"}
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(yaml.safe_dump(bad))
    snakemake = Path(sys.executable).with_name("snakemake")
    proc = subprocess.run(
        [str(snakemake), "-n", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path), "--configfile", str(cfg)],
        capture_output=True,
        text=True,
        timeout=patient(120),
    )
    assert proc.returncode != 0
    assert "methods.gg.overrides.boundary" in proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()


def test_unknown_model_lists_registry(demo):
    cfg = copy.deepcopy(demo)
    cfg["methods"]["gg"]["model"] = "dgno-cel"
    with pytest.raises(ConfigError, match=r"methods.gg.model: 'dgno-cel' is not a registered model; allowed values: .*dgno-cell"):
        validate_config(cfg)


def test_paper_scale_cost_names_defined_methods(demo):
    """A list of paper-scale cost methods must name configured methods (a typo would silently skip one)."""
    cfg = copy.deepcopy(demo)
    cfg["evaluate"] = {**cfg.get("evaluate", {}), "paper_scale_cost": ["dgno-cell", "dgno-cel"]}
    with pytest.raises(ConfigError, match="evaluate.paper_scale_cost: method 'dgno-cel' is not defined"):
        validate_config(cfg)
    cfg["evaluate"]["paper_scale_cost"] = ["dgno-cell"]
    assert validate_config(cfg)["evaluate"]["paper_scale_cost"] == ["dgno-cell"]


def test_every_paper_setting_states_its_source():
    """config/paper.yaml: each training/evaluation setting (and each per-dataset recipe) has a protocol entry."""
    cfg = load_config(ROOT / "config" / "paper.yaml")
    raw = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    protocol = cfg["protocol"]
    wanted = [f"{block}.{k}" for block in ("train", "evaluate") for k in raw[block] if k not in ("figure_images", "edge_band_px")]
    wanted += [f"datasets.{ds}.{k}" for ds, spec in raw["datasets"].items() for k in ("train", "method_overrides") if k in spec]
    missing = [w for w in wanted if w not in protocol]
    assert not missing, f"settings without a source in protocol: {missing}"
    assert {e["source"] for e in protocol.values()} <= {"authors' options", "authors' code", "paper text", "project choice"}
    # the recipe is the authors' (facts from their option and model files)
    assert (cfg["train"]["grad_clip"], cfg["train"]["batch_size"], cfg["train"]["eval_weights"], cfg["train"]["bf16"]) == (0.01, 32, "raw", False)
    assert cfg["datasets"]["bbbc006_w2"]["method_overrides"]["dgno-face"] == {"flux": "jump", "boundary": "neumann"}
    assert sum(s["iterations"] for s in cfg["datasets"]["3dhistech"]["train"]["progressive"]) == 300000


def test_protocol_and_dataset_recipes_name_real_settings(demo):
    bad = copy.deepcopy(demo)
    bad["protocol"] = {"train.grad_clipping": {"source": "paper text"}}
    with pytest.raises(ConfigError, match=r"protocol\.train\.grad_clipping: names no setting"):
        validate_config(bad)
    bad = copy.deepcopy(demo)
    first = next(iter(bad["datasets"]))
    bad["datasets"][first]["train"] = {"iteration": 5}
    with pytest.raises(ConfigError, match=rf"datasets\.{first}\.train\.iteration: not a training setting; allowed values: .*iterations"):
        validate_config(bad)
    bad = copy.deepcopy(demo)
    bad["datasets"][first]["method_overrides"] = {"dgno-fase": {"flux": "jump"}}
    with pytest.raises(ConfigError, match=r"method_overrides\.dgno-fase: not a method"):
        validate_config(bad)


def test_sigma_map_and_authors_methods_are_checked(demo):
    bad = copy.deepcopy(demo)
    bad["datasets"]["sig"] = {"source": "sigma_map", "base": "nope", "levels": {"s": [0.5, 2.0]}, "train_levels": ["s"], "test_levels": ["s"]}
    with pytest.raises(ConfigError, match=r"datasets\.sig\.base: 'nope' must name a dataset with sharp images"):
        validate_config(bad)
    bad = copy.deepcopy(demo)
    ds = next(iter(bad["experiments"]["operators"].get("datasets", [bad["experiments"]["operators"].get("dataset")])))
    bad["methods"]["dgno-cell-authors"] = {"model": "dgno-cell", "authors_checkpoints": {"elsewhere": "DGNO_BBBC006_w1_Cell"}}
    with pytest.raises(ConfigError, match=r"methods\.dgno-cell-authors\.authors_checkpoints\.elsewhere: not a dataset"):
        validate_config(bad)
    bad["methods"]["dgno-cell-authors"]["authors_checkpoints"] = {k: "DGNO_BBBC006_w1_Cell" for k in bad["datasets"] if k != ds}
    bad["experiments"]["operators"]["methods"].append("dgno-cell-authors")
    with pytest.raises(ConfigError, match=rf"'dgno-cell-authors' has no authors' checkpoint for dataset '{ds}'"):
        validate_config(bad)
