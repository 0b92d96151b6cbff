# Stage 1: sharp images (with label masks for nuclei data) and the train/val/test split of every dataset.


rule sharp_images:
    output:
        split="results/data/{dataset}/split.csv",
        gt=directory("results/data/{dataset}/gt"),
        manifest="results/data/{dataset}/manifest.json",
    log:
        "results/logs/data/{dataset}.log",
    wildcard_constraints:
        dataset=one_of(GENERATED),
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("sharp_images")
    resources:
        **resources_for("sharp_images"),
    params:
        kind=lambda wc: GENERATED_SOURCES[config["datasets"][wc.dataset]["source"]],
        size=lambda wc: config["datasets"][wc.dataset]["size"],
        counts=lambda wc: {
            k: config["datasets"][wc.dataset][k]
            for k in ("n_train", "n_val", "n_test")
        },
        seed=dataset_seed,
        photometry=lambda wc: photometry_of(wc.dataset),
    script:
        "../scripts/sharp_images.py"


rule bbbc006_plane:
    output:
        directory(f"{RAW}/bbbc006/z{{zz}}"),
    log:
        f"results/logs/download/bbbc006_z{{zz}}.log",
    wildcard_constraints:
        zz=r"\d\d",
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("bbbc006_plane")
    resources:
        **resources_for("bbbc006_plane"),
    params:
        base_url=config["downloads"]["bbbc006_url"],
        retries=config["downloads"]["retries"],
    script:
        "../scripts/bbbc006_fetch.py"


rule bbbc006_labels:
    output:
        directory(f"{RAW}/bbbc006/labels"),
    log:
        "results/logs/download/bbbc006_labels.log",
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("bbbc006_labels")
    resources:
        **resources_for("bbbc006_labels"),
    params:
        base_url=config["downloads"]["bbbc006_url"],
        retries=config["downloads"]["retries"],
    script:
        "../scripts/bbbc006_fetch.py"


rule bbbc006_prepare:
    input:
        unpack(bbbc006_planes),
    output:
        split="results/data/{dataset}/split.csv",
        gt=directory("results/data/{dataset}/gt"),
        manifest="results/data/{dataset}/manifest.json",
    log:
        "results/logs/data/{dataset}.log",
    benchmark:
        "results/benchmarks/bbbc006_prepare/{dataset}.tsv"
    wildcard_constraints:
        dataset=one_of(BBBC006),
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("bbbc006_prepare")
    resources:
        **resources_for("bbbc006_prepare"),
    params:
        dataset=bbbc006_settings,
        seed=config["seed"],
        raw=f"{RAW}/bbbc006",
    script:
        "../scripts/bbbc006_prepare.py"


rule paired_source:
    output:
        "results/sources/{dataset}.json",
    log:
        "results/logs/download/{dataset}.log",
    wildcard_constraints:
        dataset=one_of(PAIRED),
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("paired_source")
    resources:
        **resources_for("paired_source"),
    params:
        dataset=dataset_cfg,
        url=paired_url,
        retries=config["downloads"]["retries"],
    script:
        "../scripts/paired_source.py"


rule paired_prepare:
    input:
        "results/sources/{dataset}.json",
    output:
        split="results/data/{dataset}/split.csv",
        gt=directory("results/data/{dataset}/gt"),
        manifest="results/data/{dataset}/manifest.json",
    log:
        "results/logs/data/{dataset}.log",
    benchmark:
        "results/benchmarks/paired_prepare/{dataset}.tsv"
    wildcard_constraints:
        dataset=one_of(PAIRED),
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("paired_prepare")
    resources:
        **resources_for("paired_prepare"),
    params:
        dataset=dataset_cfg,
    script:
        "../scripts/paired_prepare.py"
