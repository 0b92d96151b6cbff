# The authors' released weights (target `authors`): their six checkpoints, downloaded where the
# network is and imported, then evaluated like any trained model (rule evaluate reads
# results/authors/... for methods with `authors_checkpoints`); their BBBC006 archive and split (the
# planes of its blur files from the names the Broad archives list, bbbc006_broad_names); evaluations
# with argmax and Gumbel routing, StarDist AP on their restorations, and the table "Reproduction from
# the authors' released weights" (dgno.workflow.authors).


rule authors_checkpoint:
    output:
        f"{RAW}/authors/{{name}}.pth",
    log:
        "results/logs/download/authors_{name}.log",
    wildcard_constraints:
        name=r"[A-Za-z0-9_.-]+",
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("authors_checkpoint")
    resources:
        **resources_for("authors_checkpoint"),
    params:
        url=lambda wc: config["downloads"]["authors_checkpoints_url"] + f"{wc.name}.pth",
        sha256=lambda wc: config["downloads"]["authors_checkpoints_sha256"].get(wc.name),
        retries=config["downloads"]["retries"],
    script:
        "../scripts/authors_checkpoint.py"


rule import_authors:
    input:
        checkpoint=authors_checkpoint_file,
    output:
        model="results/authors/{dataset}/{method}/model.pt",
    log:
        "results/logs/import_authors/{dataset}/{method}.log",
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("import_authors")
    resources:
        **resources_for("import_authors"),
    params:
        options=authors_options,
    script:
        "../scripts/import_authors.py"


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
        unpack(authors_stardist_inputs),
    output:
        "results/authors/stardist_{dataset}.csv",
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
        methods=authors.methods(config),
    script:
        "../scripts/stardist_authors.py"


rule authors_table:
    input:
        **authors_table_inputs(),
    output:
        report(
            "results/tables/authors.csv",
            caption="../report/authors.rst",
            category="Reproduction from the authors' released weights",
        ),
    log:
        "results/logs/tables/authors.log",
    conda:
        "../../envs/report.yaml"
    threads: threads_for("authors_table")
    resources:
        **resources_for("authors_table"),
    params:
        settings=authors_settings(),
    script:
        "../scripts/authors_table.py"


rule report_authors:
    input:
        "results/tables/authors.csv",
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
