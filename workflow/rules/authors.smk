# The paper's numbers from the authors' released weights (target `authors`): their BBBC006 archive
# and split (the planes of its blur files from the names the Broad archives list, bbbc006_broad_names),
# their six checkpoints, evaluations with argmax and Gumbel routing, StarDist AP on their restorations,
# and the table "Reproduction from the released weights" (dgno.workflow.reproduction).


rule bbbc006_authors_archive:
    output:
        f"{RAW}/bbbc006/authors.json",
    log:
        "results/logs/download/bbbc006_authors.log",
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("bbbc006_authors_archive")
    resources:
        **resources_for("bbbc006_authors_archive"),
    params:
        url=config["downloads"]["bbbc006_authors_url"],
        retries=config["downloads"]["retries"],
    script:
        "../scripts/bbbc006_authors_fetch.py"


rule bbbc006_broad_names:
    output:
        f"{RAW}/bbbc006/broad_names.json",
    log:
        "results/logs/download/bbbc006_broad_names.log",
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("bbbc006_broad_names")
    resources:
        **resources_for("bbbc006_broad_names"),
    params:
        base_url=config["downloads"]["bbbc006_url"],
        retries=config["downloads"]["retries"],
    script:
        "../scripts/bbbc006_broad_names.py"


rule evaluate_gumbel:
    input:
        unpack(eval_data_inputs),
        model=trained_model,
    output:
        directory("results/eval/{dataset}/{method}/{level}/gumbel"),
    log:
        "results/logs/evaluate_gumbel/{dataset}/{method}/{level}.log",
    benchmark:
        "results/benchmarks/evaluate_gumbel/{dataset}/{method}/{level}.tsv"
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("evaluate_gumbel")
    resources:
        **resources_for("evaluate_gumbel"),
    params:
        evaluate=gumbel_settings(),
        device=config["device"],
    script:
        "../scripts/evaluate_gumbel.py"


rule stardist_authors:
    input:
        unpack(reproduction_stardist_inputs),
    output:
        "results/reproduction/stardist_{dataset}.csv",
    log:
        "results/logs/stardist/{dataset}_authors.log",
    benchmark:
        "results/benchmarks/stardist_authors/{dataset}.tsv"
    conda:
        "../../envs/stardist.yaml"
    threads: threads_for("stardist_authors")
    resources:
        **resources_for("stardist_authors"),
    params:
        level=config["experiments"].get("stardist", {}).get("level"),
        methods=reproduction.methods(config),
    script:
        "../scripts/stardist_authors.py"


rule reproduction_table:
    input:
        **reproduction_table_inputs(),
    output:
        report(
            "results/tables/reproduction.csv",
            caption="../report/reproduction.rst",
            category="Reproduction from the released weights",
        ),
    log:
        "results/logs/tables/reproduction.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("reproduction_table")
    resources:
        **resources_for("reproduction_table"),
    params:
        settings=reproduction_settings(),
    script:
        "../scripts/reproduction.py"


rule report_authors:
    input:
        "results/tables/reproduction.csv",
    output:
        "report/authors.html",
    log:
        "results/logs/report_authors.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("report_authors")
    resources:
        **resources_for("report_authors"),
    script:
        "../scripts/report.py"


rule authors:
    input:
        authors_target,
