# Stage 7: tables, figures and the standalone HTML report.


# Every results table: an experiment's (dgno.experiments.catalogue) or an ablation grid's
# (ablation_<name>); what it compares, its caption and category come from the catalogue.
rule table:
    input:
        summaries=lambda wc: table_summaries(wc.table),
        per_image=lambda wc: per_image_files(table_summaries(wc.table)),
    output:
        table=report(
            catalogue.TABLE,
            caption="../report/table.rst",
            category=lambda wc: catalogue.table_category(wc.table),
        ),
        stats=catalogue.TABLE_STATS,
    log:
        catalogue.TABLE_LOG,
    wildcard_constraints:
        table=one_of(TABLES),
    conda:
        "../../envs/report.yaml"
    threads: threads_for("table")
    resources:
        **resources_for("table"),
    params:
        spec=lambda wc: table_spec(wc.table),
        caption=lambda wc: table_caption(wc.table),
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
        figure=figure_output("edge_band"),
    log:
        "results/logs/edge_band/{dataset}.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("edge_band")
    resources:
        **resources_for("edge_band"),
    params:
        methods=lambda wc: experiment_methods(wc.dataset),
        labels=lambda wc: method_labels(experiment_methods(wc.dataset)),
        levels=lambda wc: table_levels(wc.dataset),
        band_width_px=config["evaluate"]["edge_band_px"],
        replicates=lambda wc: edge_band_replicates(wc.dataset),
        versus=lambda wc: edge_band_versus(wc.dataset),
        resampling=resampling,
        caption=figure_caption("edge_band"),
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
        **resources_for("edge_band_definition"),
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
        figure_output("visual"),
    log:
        "results/logs/figures/visual_{dataset}.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("figure_visual")
    resources:
        **resources_for("figure_visual"),
    params:
        methods=lambda wc: figure_rows(wc.dataset),
        level=lambda wc: table_levels(wc.dataset)[0],
        n_images=config["evaluate"]["figure_images"],
        caption=figure_caption("visual"),
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
        figure_output("error_difference"),
    log:
        "results/logs/figures/error_difference_{dataset}.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("figure_error_difference")
    resources:
        **resources_for("figure_error_difference"),
    params:
        pair=lambda wc: gg_dg_pair(experiment_methods(wc.dataset)),
        level=lambda wc: table_levels(wc.dataset)[0],
        band_width_px=config["evaluate"]["edge_band_px"],
        caption=figure_caption("error_difference"),
    script:
        "../scripts/figure_error_difference.py"


rule figure_training_curves:
    input:
        lambda wc: training_curves(wc.dataset),
    output:
        figure_output("training_curves"),
    log:
        "results/logs/figures/training_curves_{dataset}.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("figure_training_curves")
    resources:
        **resources_for("figure_training_curves"),
    params:
        labels=lambda wc: method_labels(experiment_methods(wc.dataset)),
        stats=canonical(config["stats"]),
        caption=figure_caption("training_curves"),
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
        figure_output("synthetic_psnr"),
    log:
        "results/logs/figures/synthetic_psnr.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("figure_synthetic")
    resources:
        **resources_for("figure_synthetic"),
    params:
        labels=method_labels(METHODS),
        caption=figure_caption("synthetic_psnr"),
    script:
        "../scripts/figure_synthetic.py"


rule figure_nonblind_sensitivity:
    input:
        "results/nonblind/{dataset}/sensitivity.csv",
    output:
        figure_output("nonblind_sensitivity"),
    log:
        "results/logs/figures/nonblind_sensitivity_{dataset}.log",
    wildcard_constraints:
        dataset=one_of(SEIDEL),
    conda:
        "../../envs/report.yaml"
    threads: threads_for("figure_nonblind_sensitivity")
    resources:
        **resources_for("figure_nonblind_sensitivity"),
    params:
        labels={**method_labels(METHODS), **DECONV_LABELS, "input": "Blurred input"},
        read_sigma=lambda wc: config["datasets"][wc.dataset]
        .get("seidel", {})
        .get("noise", {})
        .get("read_sigma"),
        caption=figure_caption("nonblind_sensitivity"),
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
        **resources_for("model_summary"),
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
        **resources_for("claims"),
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
        **resources_for("report"),
    script:
        "../scripts/report.py"


# One target per experiment of this configuration, named after it (`snakemake --cores all operators`):
# its table, the figures and the other files its report section reads.
for entry in catalogue.configured(config):

    rule:
        name:
            entry.name
        input:
            experiment_targets(entry.name),
