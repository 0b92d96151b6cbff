# Stage 7: tables, figures and the standalone HTML report.


rule table_operators:
    input:
        experiment_summaries("operators") if "operators" in EXPERIMENTS else [],
    output:
        report(
            "results/tables/operators.csv",
            caption="../report/operators.rst",
            category="GG vs LG vs DGNO",
        ),
    log:
        "results/logs/tables/operators.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("table_operators")
    resources:
        mem_mb=mem_mb_for("table_operators"),
        runtime=runtime_for("table_operators"),
    script:
        "../scripts/table.py"


rule table_synthetic:
    input:
        experiment_summaries("synthetic") if "synthetic" in EXPERIMENTS else [],
    output:
        report(
            "results/tables/synthetic.csv",
            caption="../report/synthetic.rst",
            category="Controlled synthetic experiment",
        ),
    log:
        "results/logs/tables/synthetic.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("table_synthetic")
    resources:
        mem_mb=mem_mb_for("table_synthetic"),
        runtime=runtime_for("table_synthetic"),
    script:
        "../scripts/table.py"


rule table_nonblind:
    input:
        experiment_summaries("nonblind") if "nonblind" in EXPERIMENTS else [],
    output:
        report(
            "results/tables/nonblind.csv",
            caption="../report/nonblind.rst",
            category="Non-blind comparison",
        ),
    log:
        "results/logs/tables/nonblind.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("table_nonblind")
    resources:
        mem_mb=mem_mb_for("table_nonblind"),
        runtime=runtime_for("table_nonblind"),
    script:
        "../scripts/table.py"


rule table_robustness:
    input:
        robustness_summaries(),
    output:
        report(
            "results/tables/robustness.csv",
            caption="../report/robustness.rst",
            category="Robustness",
        ),
    log:
        "results/logs/tables/robustness.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("table_robustness")
    resources:
        mem_mb=mem_mb_for("table_robustness"),
        runtime=runtime_for("table_robustness"),
    script:
        "../scripts/table.py"


rule table_experiment:
    input:
        lambda wc: experiment_summaries(wc.experiment),
    output:
        report(
            "results/tables/{experiment}.csv",
            caption="../report/experiment.rst",
            category="Main results",
        ),
    log:
        "results/logs/tables/{experiment}.log",
    wildcard_constraints:
        experiment="main|lifting|defocus",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("table_experiment")
    resources:
        mem_mb=mem_mb_for("table_experiment"),
        runtime=runtime_for("table_experiment"),
    script:
        "../scripts/table.py"


rule table_ablation:
    input:
        ablation_summaries,
    output:
        report(
            "results/tables/ablation_{ablation}.csv",
            caption="../report/ablation.rst",
            category="Ablations",
        ),
    log:
        "results/logs/tables/ablation_{ablation}.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("table_ablation")
    resources:
        mem_mb=mem_mb_for("table_ablation"),
        runtime=runtime_for("table_ablation"),
    script:
        "../scripts/table.py"


rule edge_band:
    input:
        summaries=lambda wc: summaries(
            wc.dataset,
            experiment_methods(wc.dataset),
            table_levels(wc.dataset),
        ),
    output:
        table="results/tables/edge_band_{dataset}.csv",
        figure=report(
            "results/figures/edge_band_{dataset}.png",
            caption="../report/edge_band.rst",
            category="Boundary analysis",
        ),
    log:
        "results/logs/edge_band/{dataset}.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("edge_band")
    resources:
        mem_mb=mem_mb_for("edge_band"),
        runtime=runtime_for("edge_band"),
    params:
        methods=lambda wc: experiment_methods(wc.dataset),
        labels=lambda wc: method_labels(experiment_methods(wc.dataset)),
        levels=lambda wc: table_levels(wc.dataset),
        band_width_px=config["evaluate"]["edge_band_px"],
    script:
        "../scripts/edge_band.py"


rule edge_band_definition:
    output:
        "results/tables/edge_band_definition.txt",
    log:
        "results/logs/tables/edge_band_definition.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("edge_band_definition")
    resources:
        mem_mb=mem_mb_for("edge_band_definition"),
        runtime=runtime_for("edge_band_definition"),
    params:
        band_width_px=config["evaluate"]["edge_band_px"],
    script:
        "../scripts/edge_band_definition.py"


rule figure_visual:
    input:
        summaries=lambda wc: summaries(
            wc.dataset,
            list(figure_rows(wc.dataset)),
            table_levels(wc.dataset)[:1],
        ),
    output:
        report(
            "results/figures/visual_{dataset}.png",
            caption="../report/visual.rst",
            category="Visual comparisons",
        ),
    log:
        "results/logs/figures/visual_{dataset}.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("figure_visual")
    resources:
        mem_mb=mem_mb_for("figure_visual"),
        runtime=runtime_for("figure_visual"),
    params:
        methods=lambda wc: figure_rows(wc.dataset),
        level=lambda wc: table_levels(wc.dataset)[0],
        n_images=config["evaluate"]["figure_images"],
    script:
        "../scripts/figure_visual.py"


rule figure_error_difference:
    input:
        summaries=lambda wc: summaries(
            wc.dataset,
            experiment_methods(wc.dataset),
            table_levels(wc.dataset),
        ),
    output:
        report(
            "results/figures/error_difference_{dataset}.png",
            caption="../report/error_difference.rst",
            category="Boundary analysis",
        ),
    log:
        "results/logs/figures/error_difference_{dataset}.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("figure_error_difference")
    resources:
        mem_mb=mem_mb_for("figure_error_difference"),
        runtime=runtime_for("figure_error_difference"),
    params:
        pair=lambda wc: gg_dg_pair(experiment_methods(wc.dataset)),
        level=lambda wc: table_levels(wc.dataset)[0],
        band_width_px=config["evaluate"]["edge_band_px"],
    script:
        "../scripts/figure_error_difference.py"


rule figure_training_curves:
    input:
        lambda wc: [
            f"results/train/{wc.dataset}/{m}/train_metrics.csv"
            for m in experiment_methods(wc.dataset)
            if "official" not in config["methods"][m]
        ],
    output:
        report(
            "results/figures/training_curves_{dataset}.png",
            caption="../report/training_curves.rst",
            category="Training",
        ),
    log:
        "results/logs/figures/training_curves_{dataset}.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("figure_training_curves")
    resources:
        mem_mb=mem_mb_for("figure_training_curves"),
        runtime=runtime_for("figure_training_curves"),
    params:
        labels=lambda wc: method_labels(experiment_methods(wc.dataset)),
    script:
        "../scripts/figure_training_curves.py"


rule figure_synthetic:
    input:
        "results/tables/synthetic.csv",
        edge=(
            [
                f"results/tables/edge_band_{ds}.csv"
                for ds in experiment_datasets("synthetic")
            ]
            if "synthetic" in EXPERIMENTS
            else []
        ),
    output:
        report(
            "results/figures/synthetic_psnr.png",
            caption="../report/synthetic_psnr.rst",
            category="Controlled synthetic experiment",
        ),
    log:
        "results/logs/figures/synthetic_psnr.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("figure_synthetic")
    resources:
        mem_mb=mem_mb_for("figure_synthetic"),
        runtime=runtime_for("figure_synthetic"),
    params:
        labels=method_labels(METHODS),
    script:
        "../scripts/figure_synthetic.py"


rule figure_nonblind_sensitivity:
    input:
        "results/nonblind/{dataset}/sensitivity.csv",
    output:
        report(
            "results/figures/nonblind_sensitivity_{dataset}.png",
            caption="../report/nonblind_sensitivity.rst",
            category="Non-blind comparison",
        ),
    log:
        "results/logs/figures/nonblind_sensitivity_{dataset}.log",
    wildcard_constraints:
        dataset=one_of(SEIDEL),
    conda:
        "../../envs/report.yaml"
    threads: threads_for("figure_nonblind_sensitivity")
    resources:
        mem_mb=mem_mb_for("figure_nonblind_sensitivity"),
        runtime=runtime_for("figure_nonblind_sensitivity"),
    params:
        labels={**method_labels(METHODS), **DECONV_LABELS, "input": "Blurred input"},
        read_sigma=lambda wc: config["datasets"][wc.dataset]
        .get("seidel", {})
        .get("noise", {})
        .get("read_sigma"),
    script:
        "../scripts/figure_nonblind_sensitivity.py"


rule model_summary:
    output:
        report(
            "results/tables/model_summary.csv",
            caption="../report/model_summary.rst",
            category="Model cost",
        ),
    log:
        "results/logs/tables/model_summary.log",
    benchmark:
        "results/benchmarks/model_summary/model_summary.tsv"
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("model_summary")
    resources:
        mem_mb=mem_mb_for("model_summary"),
        runtime=runtime_for("model_summary"),
    params:
        methods={m: config["methods"][m] for m in METHODS},
        scale=config["scale"],
        paper_methods=paper_cost_methods(),
        size=256,
    script:
        "../scripts/model_summary.py"


rule report:
    input:
        report_inputs() + analysis_report_inputs(),
    output:
        "report/index.html",
    log:
        "results/logs/report.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("report")
    resources:
        mem_mb=mem_mb_for("report"),
        runtime=runtime_for("report"),
    script:
        "../scripts/report.py"


rule operators:
    input:
        "results/tables/operators.csv",


rule nonblind:
    input:
        "results/tables/nonblind.csv",
        [
            f"results/figures/nonblind_sensitivity_{EXPERIMENTS['nonblind']['dataset']}.png"
        ]
        if "nonblind" in EXPERIMENTS
        else [],


rule synthetic:
    input:
        "results/tables/synthetic.csv",
        "results/figures/synthetic_psnr.png",
