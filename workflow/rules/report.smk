# Stage 7: tables, figures and the standalone HTML report.


rule table_operators:
    input:
        summaries=(
            experiment_summaries("operators") if "operators" in EXPERIMENTS else []
        ),
        per_image=per_image_files(
            experiment_summaries("operators") if "operators" in EXPERIMENTS else []
        ),
    output:
        table=report(
            "results/tables/operators.csv",
            caption="../report/operators.rst",
            category="GG vs LG vs DGNO",
        ),
        stats="results/tables/operators_stats.csv",
    log:
        "results/logs/tables/operators.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("table_operators")
    resources:
        mem_mb=mem_mb_for("table_operators"),
        runtime=runtime_for("table_operators"),
    params:
        spec=table_spec("operators") if "operators" in EXPERIMENTS else {},
        resampling=resampling,
    script:
        "../scripts/table.py"


rule table_synthetic:
    input:
        summaries=(
            experiment_summaries("synthetic") if "synthetic" in EXPERIMENTS else []
        ),
        per_image=per_image_files(
            experiment_summaries("synthetic") if "synthetic" in EXPERIMENTS else []
        ),
    output:
        table=report(
            "results/tables/synthetic.csv",
            caption="../report/synthetic.rst",
            category="Controlled synthetic experiment",
        ),
        stats="results/tables/synthetic_stats.csv",
    log:
        "results/logs/tables/synthetic.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("table_synthetic")
    resources:
        mem_mb=mem_mb_for("table_synthetic"),
        runtime=runtime_for("table_synthetic"),
    params:
        spec=table_spec("synthetic") if "synthetic" in EXPERIMENTS else {},
        resampling=resampling,
    script:
        "../scripts/table.py"


rule table_nonblind:
    input:
        summaries=experiment_summaries("nonblind") if "nonblind" in EXPERIMENTS else [],
        per_image=per_image_files(
            experiment_summaries("nonblind") if "nonblind" in EXPERIMENTS else []
        ),
    output:
        table=report(
            "results/tables/nonblind.csv",
            caption="../report/nonblind.rst",
            category="Non-blind comparison",
        ),
        stats="results/tables/nonblind_stats.csv",
    log:
        "results/logs/tables/nonblind.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("table_nonblind")
    resources:
        mem_mb=mem_mb_for("table_nonblind"),
        runtime=runtime_for("table_nonblind"),
    params:
        spec=table_spec("nonblind") if "nonblind" in EXPERIMENTS else {},
        resampling=resampling,
    script:
        "../scripts/table.py"


rule table_robustness:
    input:
        summaries=robustness_summaries(),
        per_image=per_image_files(robustness_summaries()),
    output:
        table=report(
            "results/tables/robustness.csv",
            caption="../report/robustness.rst",
            category="Robustness",
        ),
        stats="results/tables/robustness_stats.csv",
    log:
        "results/logs/tables/robustness.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("table_robustness")
    resources:
        mem_mb=mem_mb_for("table_robustness"),
        runtime=runtime_for("table_robustness"),
    params:
        spec=table_spec("robustness") if "robustness" in EXPERIMENTS else {},
        resampling=resampling,
    script:
        "../scripts/table.py"


rule table_experiment:
    input:
        summaries=lambda wc: experiment_summaries(wc.experiment),
        per_image=lambda wc: per_image_files(experiment_summaries(wc.experiment)),
    output:
        table=report(
            "results/tables/{experiment}.csv",
            caption="../report/experiment.rst",
            category="Main results",
        ),
        stats="results/tables/{experiment}_stats.csv",
    log:
        "results/logs/tables/{experiment}.log",
    wildcard_constraints:
        experiment="main|lifting|defocus|synthetic_bbbc006|dpdd|realdof",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("table_experiment")
    resources:
        mem_mb=mem_mb_for("table_experiment"),
        runtime=runtime_for("table_experiment"),
    params:
        spec=lambda wc: table_spec(wc.experiment),
        resampling=resampling,
    script:
        "../scripts/table.py"


rule table_ablation:
    input:
        summaries=ablation_summaries,
        per_image=lambda wc: per_image_files(ablation_summaries(wc)),
    output:
        table=report(
            "results/tables/ablation_{ablation}.csv",
            caption="../report/ablation.rst",
            category="Ablations",
        ),
        stats="results/tables/ablation_{ablation}_stats.csv",
    log:
        "results/logs/tables/ablation_{ablation}.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("table_ablation")
    resources:
        mem_mb=mem_mb_for("table_ablation"),
        runtime=runtime_for("table_ablation"),
    params:
        spec=lambda wc: table_spec(f"ablation_{wc.ablation}"),
        resampling=resampling,
    script:
        "../scripts/table.py"


rule edge_band:
    input:
        summaries=lambda wc: edge_band_summaries(wc.dataset),
    output:
        table="results/tables/edge_band_{dataset}.csv",
        per_image="results/tables/edge_band_{dataset}_per_image.csv",
        stats="results/tables/edge_band_{dataset}_stats.csv",
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
        replicates=lambda wc: edge_band_replicates(wc.dataset),
        versus=lambda wc: edge_band_versus(wc.dataset),
        resampling=resampling,
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
        lambda wc: training_curves(wc.dataset),
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
        stats=canonical(config["stats"]),
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


rule claims:
    input:
        report_inputs() + (["results/tables/runtime_memory.csv"] if BENCH_FILES else []),
    output:
        "results/tables/claims.csv",
    log:
        "results/logs/tables/claims.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("claims")
    resources:
        mem_mb=mem_mb_for("claims"),
        runtime=runtime_for("claims"),
    params:
        stats=canonical(config["stats"]),
    script:
        "../scripts/claims.py"


rule report:
    input:
        report_inputs() + analysis_report_inputs() + ["results/tables/claims.csv"],
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
