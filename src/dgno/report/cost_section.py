"""Report sections on cost: parameters / FLOPs (Fig. 1) and runtime / memory (recorded benchmarks)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dgno.report.psnr_params import published_params
from dgno.report.reading import load_paper, paper_key, paper_row
from dgno.report.render import Cell, ShownTable
from dgno.report.section import Section, catalogue_figure


def cost_table(results: Path, methods: list[str], method_cfgs: dict[str, dict], paper_rows: dict[str, dict]) -> ShownTable | None:
    """Parameters and FLOPs (256×256, 1 channel) of each method at the run's scale and at paper scale.

    The paper-scale parameter cell shows, below the counted value, the count printed in the DGNO
    paper (its GG/LG/DGNO table) or else in the baseline's original paper (paper_values.yaml,
    `baseline_params`, each with its source); methods without a printed count show none.
    """
    path = results / "tables" / "model_summary.csv"
    if not path.exists():
        return None
    df = pd.read_csv(path)
    scales = list(dict.fromkeys(df["scale"]))
    table = ShownTable(columns=[(f"{s} scale", m) for s in scales for m in ("params_m", "gmacs")])
    sources: dict[str, str] = {}
    for method in methods:
        cfg = method_cfgs[method]
        key = paper_key(cfg, method)
        prow = paper_row(paper_rows, cfg, method)
        published = published_params(key)
        cells = []
        for group, metric in table.columns:
            scale = group.split()[0]
            sub = df[(df["method"] == method) & (df["scale"] == scale)]
            measured = float(sub[metric].iloc[0]) if not sub.empty else None
            paper = prow.get({"gmacs": "gflops"}.get(metric, metric)) if scale == "paper" else None
            if scale == "paper" and metric == "params_m" and paper is None and published is not None:
                paper = published["params_m"]
                sources[cfg.get("label", method)] = published["source"]
            command = None
            if measured is None:  # left out by evaluate.paper_scale_cost, or the table predates the method
                command = f"dgno summary {cfg['model']} --scale {scale} --size 256   (or list {method} in evaluate.paper_scale_cost)"
            cells.append(Cell(measured=measured, paper=paper, digits=2, command=command))
        table.rows.append((cfg.get("label", method), cells))
    table.caption = (
        "Parameters in millions and multiply-accumulates (GMACs = FLOPs/2, torch.utils.flop_counter) of one 256×256 forward pass, "
        "1 input channel. The paper's column is headed 'FLOPs (G)'; its values match MAC counts, so they are compared with GMACs."
    )
    if sources:
        table.caption += (
            " Paper-scale parameters below a baseline's count are from that baseline's original paper (3-channel configuration; "
            "not from the DGNO paper): " + "; ".join(f"{k}: {v}" for k, v in sources.items()) + "."
        )
    return table


def cost_section(config: dict, results: Path) -> Section:
    """Fig. 1 of the paper: PSNR vs parameters (left) and FLOPs vs resolution (right), with the cost table."""
    mcfg = config["methods"]
    ablated = {r["method"] for runs in config.get("ablation_runs", {}).values() for r in runs}
    methods = [m for m in mcfg if m not in ablated]  # grid points cost what their base method costs
    sec = Section(
        id="cost",
        title="Model cost: PSNR vs parameters, FLOPs vs resolution (Fig. 1)",
        paper_source=load_paper("params_flops").get("source", ""),
    )
    sec.notes.append(
        "Parameters and FLOPs are counted here on the models this pipeline builds (1 input channel); the paper prints counts only "
        "for DGNO/GG/LG, and baseline counts from the baselines' own papers are shown beside ours where they could be confirmed "
        "(paper_values.yaml, baseline_params, with the source of each)."
    )
    cost = cost_table(results, methods, mcfg, load_paper("operators").get("rows", {}))
    if cost is not None:
        sec.tables.append(cost)
    res = resolution_table(results, methods, mcfg)
    if res is not None:
        sec.tables.append(res)
    if "main" in config["experiments"]:
        sec.figures.append(catalogue_figure(results, "psnr_vs_params"))
    sec.figures.append(catalogue_figure(results, "cost_vs_resolution"))
    return sec


def resolution_table(results: Path, methods: list[str], method_cfgs: dict[str, dict]) -> ShownTable | None:
    """GMACs per image size and method, from cost_vs_resolution.csv (sizes and scale from config `analysis`)."""
    path = results / "tables" / "cost_vs_resolution.csv"
    if not path.exists():
        return None
    df = pd.read_csv(path)
    sizes = sorted(df["size"].unique())
    table = ShownTable(columns=[("params", "params_m")] + [(f"{int(n)}×{int(n)}", "gmacs") for n in sizes])
    for method in methods:
        sub = df[df["method"] == method].set_index("size")
        if sub.empty:
            continue
        cells = [Cell(measured=float(sub["params_m"].iloc[0]), digits=3)]
        cells += [Cell(measured=float(sub.loc[n, "gmacs"]) if n in sub.index else None, digits=3) for n in sizes]
        table.rows.append((method_cfgs[method].get("label", method), cells))
    table.caption = f"Parameters (M) and GMACs of one forward pass on a 1-channel image of each size, {df['scale'].iloc[0]} scale (config key analysis.cost_sizes / cost_scale)."
    return table


BENCH_COMMAND = "dgno bench forward dgno-cell swinir restormer mpt --scale paper --sizes 128 256 384 512 --out benchmarks/results/forward_<device>.json; snakemake --cores 1 results/tables/runtime_memory.csv"


def _provenance(sub: pd.DataFrame, file: str, device: str) -> str:
    commits = ", ".join(sorted({str(c) for c in sub["commit"].fillna("unknown")}))
    dates = ", ".join(sorted({str(d)[:10] for d in sub["recorded_utc"].fillna("unknown")}))
    return f"Recorded benchmark (not measured in this run): file benchmarks/results/{file}, commit {commits}, device {device}, recorded {dates}."


def _ratio_to(sub: pd.DataFrame, model: str, reference: str, size: int, column: str) -> float | None:
    a, b = sub[(sub["model"] == model) & (sub["size"] == size)], sub[(sub["model"] == reference) & (sub["size"] == size)]
    if a.empty or b.empty or pd.isna(a[column].iloc[0]) or pd.isna(b[column].iloc[0]) or not b[column].iloc[0]:
        return None
    return float(a[column].iloc[0] / b[column].iloc[0])


def _paper_ratio(prows: dict, size: float, metric: str) -> float | None:
    row = prows.get(f"s{int(size)}", {})
    a, b = row.get("dgno", {}).get(metric), row.get("restormer", {}).get(metric)
    return a / b if a and b else None


def _paper_protocol_table(auto: pd.DataFrame, dgno: list, prows: dict, file: str, device: str) -> ShownTable:
    """Batch 1, float32, forward with autograd on (the protocol of the paper's memory column), beside the paper."""
    sizes = sorted(int(n) for n in auto["size"].unique())
    table = ShownTable(columns=[(f"{int(n)} px", m) for n in sizes for m in ("img/s", "peak GB")])
    for model, g in auto.groupby("model", sort=False):
        g = g.assign(size=g["size"].astype(int)).set_index("size")
        key = "dgno" if str(model).startswith("dgno") else str(model).split(" [")[0]
        cells = []
        for n, metric in table.columns:
            size, pcell = int(n.split()[0]), prows.get(f"s{int(n.split()[0])}", {}).get(key, {})
            if size not in g.index:
                cells.append(Cell(measured=None, paper=pcell.get("img_per_s" if metric == "img/s" else "mem_gb"), digits=2))
            elif metric == "img/s":
                cells.append(Cell(measured=float(g.loc[size, "images_per_second"]), paper=pcell.get("img_per_s"), digits=2))
            else:
                cells.append(Cell(measured=float(g.loc[size, "peak_memory_mb"]) / 1024, paper=pcell.get("mem_gb"), digits=2))
        table.rows.append((str(model), cells))
    for model in dgno:
        cells = []
        for n, metric in table.columns:
            size = int(n.split()[0])
            column, pmetric = ("images_per_second", "img_per_s") if metric == "img/s" else ("peak_memory_mb", "mem_gb")
            cells.append(
                Cell(measured=_ratio_to(auto, model, "restormer", size, column), paper=_paper_ratio(prows, size, pmetric), digits=2)
            )
        if any(c.measured is not None for c in cells):
            table.rows.append((f"{model} ÷ Restormer", cells))
    table.caption = (
        "The paper's protocol, as found by the benchmark: batch 1, float32, eager forward pass with autograd on "
        "(no torch.no_grad), peak CUDA memory allocated. Under it the measured memory matches the paper's column for "
        "DGNO, Restormer and MPT (the other protocols recorded in the file's 'memory' list do not). "
        "Paper values (beside each measured value) are the paper's Table 11 (its GPU is not stated in the table); ratio rows: the paper's DGNO ÷ Restormer. "
        + _provenance(auto, file, device)
    )
    return table


def _inference_tables(fast: pd.DataFrame, dgno: list, prows: dict, file: str, device: str) -> list[ShownTable]:
    """One table per (batch, precision): each model's fastest way to run without autograd, and the ratios to Restormer."""
    tables = []
    for (batch, bf16), sub in fast.groupby(["batch", "amp_bf16"], sort=True):
        best = sub.sort_values("images_per_second").groupby(["model", "size"], as_index=False).last()
        best["size"] = best["size"].astype(int)
        sizes = sorted(best["size"].unique())
        table = ShownTable(columns=[(f"{int(n)} px", "img/s") for n in sizes])
        for model, g in best.groupby("model", sort=False):
            g = g.set_index("size")
            table.rows.append(
                (
                    f"{model} ({'/'.join(dict.fromkeys(g['mode']))})",
                    [Cell(measured=float(g.loc[n, "images_per_second"]) if n in g.index else None, digits=2) for n in sizes],
                )
            )
        for model in dgno:
            ratios = [
                Cell(
                    measured=_ratio_to(best, model, "restormer", n, "images_per_second"),
                    paper=_paper_ratio(prows, n, "img_per_s"),
                    digits=2,
                )
                for n in sizes
            ]
            if any(c.measured is not None for c in ratios):  # a file without Restormer at this batch has no ratio
                table.rows.append((f"{model} ÷ Restormer", ratios))
        table.caption = (
            f"Inference throughput without autograd, batch {int(batch)}, {'bfloat16 autocast' if bf16 else 'float32'}: each model's fastest "
            "mode among eager, CUDA-graph replay (graphs) and torch.compile (compile), named after the model (SwinIR and MPT copy "
            "host tensors inside forward and cannot be captured). DGNO uses the Triton selective scan. Ratio rows show the paper's "
            "DGNO ÷ Restormer throughput ratio beside the measured one. " + _provenance(sub, file, device)
        )
        tables.append(table)
    return tables


def _training_table(train: pd.DataFrame, file: str, device: str) -> ShownTable:
    """Training steps: ms per iteration, hours per 60 k iterations, peak memory."""
    table = ShownTable(columns=[("step", "ms/it"), ("60 k iterations", "hours"), ("peak", "GB")])
    for r in train.itertuples():
        label = f"{r.model}, batch {int(r.batch)} at {int(r.size)} px, {'bf16 autocast' if r.amp_bf16 else 'float32'}{', TF32 matmul' if '+tf32' in str(r.mode) else ''}"
        if "+levers" in str(r.mode) and isinstance(getattr(r, "detail", None), str):
            label += f", {r.detail}"
        sec_it = float(r.seconds_per_iteration)
        gb = None if pd.isna(r.peak_memory_mb) else float(r.peak_memory_mb) / 1024
        table.rows.append(
            (
                label,
                [Cell(measured=1e3 * sec_it, digits=1), Cell(measured=60000 * sec_it / 3600, digits=2), Cell(measured=gb, digits=1)],
            )
        )
    table.caption = "Training steps (forward, multi-scale L1 + FFT loss, backward, AdamW). " + _provenance(train, file, device)
    if train["mode"].astype(str).str.contains(r"\+levers").any():
        table.caption += (
            " Rows naming levers are the training loop's own step (dgno.train.step, with the EMA update) under the train: options "
            "named; 'the default step' has none of them."
        )
    return table


def _evaluation_table(evaluate: pd.DataFrame, file: str, device: str) -> ShownTable:
    """Whole-test-set evaluation (benchmarks/gpu/levers_and_evaluation.py): images/s per setting, what each setting was."""
    table = ShownTable(columns=[("evaluation", "img/s")])
    for r in evaluate.itertuples():
        ips = None if pd.isna(r.images_per_second) else float(r.images_per_second)
        table.rows.append((f"{r.model}, {r.mode}: {r.detail}", [Cell(measured=ips, digits=2)]))
    table.caption = (
        "Evaluation of a whole test set (dgno.inference.evaluate.evaluate_checkpoint: tiles, network, scores, restored TIFFs written), "
        "images per second of wall time. " + _provenance(evaluate, file, device)
    )
    return table


def speed_tables(forward: pd.DataFrame, train: pd.DataFrame, prows: dict, file: str, device: str, evaluate: pd.DataFrame | None = None) -> list[ShownTable]:
    """Tables of one ``benchmarks/gpu/speed.py`` file: the paper's protocol, inference per batch/precision, training.

    * paper protocol (mode "autograd"): batch 1, float32, forward with autograd on — the protocol whose
      peak memory reproduces the paper's memory column — beside the paper's GB / img/s, with the
      DGNO ÷ Restormer ratios beside the paper's ratios;
    * inference without autograd, for each (batch, precision): each model's fastest way to run
      (eager, CUDA-graph replay or torch.compile; the mode is named), and the ratios to Restormer;
    * training steps: ms per iteration, hours per 60 k iterations, peak memory (with the speed levers named);
    * whole-test-set evaluations (``benchmarks/gpu/levers_and_evaluation.py`` files), when given.
    """
    dgno = [m for m in dict.fromkeys(forward["model"]) if str(m).startswith("dgno")]
    auto = forward[forward["mode"] == "autograd"]
    tables = [_paper_protocol_table(auto, dgno, prows, file, device)] if not auto.empty else []
    without_autograd = forward["mode"].astype(str).str.split("+").str[0].isin(["eager", "graphs", "compile"])  # "+cl": channels-last
    tables += _inference_tables(forward[without_autograd], dgno, prows, file, device)
    if not train.empty:
        tables.append(_training_table(train, file, device))
    if evaluate is not None and not evaluate.empty:
        tables.append(_evaluation_table(evaluate, file, device))
    return tables


def findings_table(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]] | None:
    """The findings of ``benchmarks/gpu/levers_and_evaluation.py`` files (kind "decision"), one row each: file, topic, finding."""
    found = frame[frame["kind"] == "decision"] if "kind" in frame else frame
    if found.empty:
        return None
    return ["file", "topic", "finding"], [[f"benchmarks/results/{r.file}", str(r.model), str(r.detail)] for r in found.itertuples()]


def _bench_table(sub: pd.DataFrame, file: str, device: str, prows: dict) -> ShownTable:
    """One ``dgno bench`` file's forward passes: img/s and peak memory per size, beside the paper's on a GPU."""
    sizes = sorted(sub["size"].unique())
    table = ShownTable(columns=[(f"{int(n)} px", m) for n in sizes for m in ("img/s", "peak GB")])
    gpu = str(device).startswith("cuda")
    for model, g in sub.groupby("model", sort=False):
        g = g.set_index("size")
        key = "dgno" if str(model).startswith("dgno") else str(model)
        cells = []
        for n, metric in table.columns:
            size = int(n.split()[0])
            pcell = prows.get(f"s{size}", {}).get(key, {}) if gpu else {}
            if size not in g.index:
                cells.append(Cell(measured=None, paper=None, digits=2))
            elif metric == "img/s":
                cells.append(Cell(measured=float(g.loc[size, "images_per_second"]), paper=pcell.get("img_per_s"), digits=2))
            else:
                mb = g.loc[size, "peak_memory_mb"]
                cells.append(Cell(measured=None if pd.isna(mb) else float(mb) / 1024, paper=pcell.get("mem_gb"), digits=2))
        table.rows.append((f"{model} ({g['scale'].iloc[0]} scale)", cells))
    commits = sorted({str(c) for c in sub.get("commit", pd.Series(["unknown"])).fillna("unknown")})
    dates = sorted({str(d)[:10] for d in sub.get("recorded_utc", pd.Series(["unknown"])).fillna("unknown")})
    table.caption = (
        f"Recorded benchmark (not measured in this run): file benchmarks/results/{file}, commit {', '.join(commits)}, device {device}, "
        f"recorded {', '.join(dates)}; batch 1, forward pass without autograd; peak memory = {sub['memory'].iloc[0]}."
        + (" Paper values (GB / img/s, GPU and precision not stated in the paper) are shown below the measured ones." if gpu else "")
    )
    return table


def runtime_section(results: Path) -> tuple[Section, bool]:
    """Throughput / peak memory vs image size per device from results/tables/runtime_memory.csv (rule runtime_memory).

    Returns (section, measured?): without benchmark results the section says 'not run' and gives the commands.
    """
    paper = load_paper("runtime_memory")
    sec = Section(id="runtime_memory", title="Runtime and memory vs image size", paper_source=paper.get("source", ""))
    path = results / "tables" / "runtime_memory.csv"
    frame = pd.read_csv(path) if path.exists() else pd.DataFrame()
    forward = frame[frame["kind"] == "forward"] if not frame.empty else frame
    unread = frame[frame["kind"] == "unreadable"] if not frame.empty else frame
    if not unread.empty:
        sec.notes.append(
            "Benchmark files that could not be read (not shown): "
            + "; ".join(f"benchmarks/results/{r.file}: {r.problem}" for r in unread.itertuples())
            + "."
        )
    if forward.empty:
        sec.notes.append(f"Not run: no benchmark results. Commands: {BENCH_COMMAND}")
        return sec, False
    sec.notes.append(
        "These are recorded benchmarks: files in benchmarks/results/ measured by earlier commands on the machine each names, "
        "not measured by this run of the workflow. Each table says which file, commit, device and date."
    )
    prows = paper.get("rows", {})
    modes = frame["mode"] if "mode" in frame else pd.Series(index=frame.index, dtype=object)
    speed = frame[modes.notna() & frame["kind"].isin(["forward", "train", "evaluate"])]  # benchmarks/gpu/speed.py and levers_and_evaluation.py files
    speed_out = []
    for (file, device), sub in speed.groupby(["file", "device"], sort=False):
        speed_out += speed_tables(sub[sub["kind"] == "forward"], sub[sub["kind"] == "train"], prows, file, str(device), evaluate=sub[sub["kind"] == "evaluate"])
    findings = findings_table(frame)
    if findings:
        sec.text_tables.append(findings)
    # the table comparable with the paper's (its memory protocol) first, then inference, then training
    sec.tables.extend(sorted(speed_out, key=lambda t: (not t.caption.startswith("The paper's protocol"), t.caption.startswith("Training"))))
    forward = forward[forward["mode"].isna()] if "mode" in forward else forward
    for (file, device), sub in forward.groupby(["file", "device"], sort=False):
        sec.tables.append(_bench_table(sub, file, device, prows))
    train = frame[(frame["kind"] == "train") & modes.isna()]
    for _, r in train.iterrows():
        sec.notes.append(
            f"Training step ({r['file']}, {r['device']}): {r['model']} {r['scale']} scale, batch {int(r['batch'])} at {int(r['size'])} px"
            f"{', bf16 autocast' if r['amp_bf16'] else ''}: {r['images_per_second']:.1f} images/s, peak {r['peak_memory_mb'] / 1024:.1f} GB."
        )
    sec.figures.append(catalogue_figure(results, "runtime_memory"))
    return sec, True
