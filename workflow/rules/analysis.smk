# Stage 7a: analyses behind the paper's figures (latent effective rank, learned operator maps,
# local attribution maps, cost vs resolution, PSNR vs parameters, runtime/memory vs image size).


rule effective_rank:
    input:
        unpack(rank_inputs),
    output:
        table="results/tables/effective_rank_{dataset}.csv",
        figure=figure_output("effective_rank"),
    log:
        "results/logs/effective_rank/{dataset}.log",
    benchmark:
        "results/benchmarks/effective_rank/{dataset}.tsv"
    wildcard_constraints:
        dataset=one_of(RANK_DATASETS),
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("effective_rank")
    resources:
        **resources_for("effective_rank"),
    params:
        methods=lambda wc: rank_methods(wc.dataset),
        labels=lambda wc: method_labels(rank_methods(wc.dataset)),
        level=lambda wc: rank_level(wc.dataset),
        max_images=config["analysis"]["rank_images"],
        device=config["device"],
        caption=figure_caption("effective_rank"),
    script:
        "../scripts/effective_rank.py"


rule figure_operators:
    input:
        unpack(operator_map_inputs),
    output:
        table="results/tables/operator_maps_{dataset}.csv",
        figure=figure_output("operator_maps"),
    log:
        "results/logs/figure_operators/{dataset}.log",
    benchmark:
        "results/benchmarks/figure_operators/{dataset}.tsv"
    wildcard_constraints:
        dataset=one_of(RANK_DATASETS),
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("figure_operators")
    resources:
        **resources_for("figure_operators"),
    params:
        methods=lambda wc: rank_methods(wc.dataset),
        labels=lambda wc: method_labels(rank_methods(wc.dataset)),
        level=lambda wc: rank_level(wc.dataset),
        stat_images=OPERATOR_MAP_IMAGES,
        device=config["device"],
        caption=figure_caption("operator_maps"),
    script:
        "../scripts/figure_operators.py"


rule figure_lam:
    input:
        unpack(lam_inputs),
    output:
        table="results/tables/lam_{dataset}.csv",
        figure=figure_output("lam"),
    log:
        "results/logs/figure_lam/{dataset}.log",
    benchmark:
        "results/benchmarks/figure_lam/{dataset}.tsv"
    wildcard_constraints:
        dataset=one_of(LAM_DATASETS),
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("figure_lam")
    resources:
        **resources_for("figure_lam"),
    params:
        lam=canonical(LAM),  # the experiment's settings, defaults filled in by the schema
        labels=method_labels(LAM.get("methods", [])),
        level=lambda wc: lam_level(wc.dataset),
        device=config["device"],
        caption=figure_caption("lam"),
    script:
        "../scripts/figure_lam.py"


rule cost_vs_resolution:
    output:
        table="results/tables/cost_vs_resolution.csv",
        figure=figure_output("cost_vs_resolution"),
    log:
        "results/logs/tables/cost_vs_resolution.log",
    benchmark:
        "results/benchmarks/cost_vs_resolution/cost_vs_resolution.tsv"
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("cost_vs_resolution")
    resources:
        **resources_for("cost_vs_resolution"),
    params:
        methods=canonical({m: config["methods"][m] for m in COST_METHODS}),
        labels=method_labels(COST_METHODS),
        sizes=config["analysis"]["cost_sizes"],
        scale=config["analysis"]["cost_scale"] or config["scale"],
        device=config["device"],
        caption=figure_caption("cost_vs_resolution"),
    script:
        "../scripts/cost_vs_resolution.py"


rule figure_psnr_params:
    input:
        summaries=experiment_summaries("main") if "main" in EXPERIMENTS else [],
        model_summary="results/tables/model_summary.csv",
    output:
        table="results/tables/psnr_vs_params.csv",
        figure=figure_output("psnr_vs_params"),
    log:
        "results/logs/figures/psnr_vs_params.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("figure_psnr_params")
    resources:
        **resources_for("figure_psnr_params"),
    params:
        dataset=main_dataset(),
        levels=table_levels(main_dataset()) if main_dataset() else [],
        scale=config["scale"],
        labels=(
            method_labels(EXPERIMENTS["main"]["methods"])
            if "main" in EXPERIMENTS
            else {}
        ),
        paper_keys=(
            {
                config["methods"][m].get("label", m): (
                    config["methods"][m].get("paper_key")
                    or config["methods"][m]["model"].replace("-", "_")
                )
                for m in EXPERIMENTS["main"]["methods"]
            }
            if "main" in EXPERIMENTS
            else {}
        ),
        paper_column=(
            config["datasets"][main_dataset()].get("paper_column")
            if main_dataset()
            else None
        ),
        caption=figure_caption("psnr_vs_params"),
    script:
        "../scripts/figure_psnr_params.py"


rule runtime_memory:
    input:
        BENCH_FILES,
    output:
        table="results/tables/runtime_memory.csv",
        figure=figure_output("runtime_memory"),
    log:
        "results/logs/figures/runtime_memory.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("runtime_memory")
    resources:
        **resources_for("runtime_memory"),
    params:
        caption=figure_caption("runtime_memory"),
    script:
        "../scripts/runtime_memory.py"


rule analysis:
    input:
        analysis_report_inputs(),
