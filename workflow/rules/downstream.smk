# Stage 5: the StarDist downstream check (TensorFlow, in its own environment).
# The segmentation model is an explicit choice (experiments.stardist.model): the published
# pretrained model, fetched by a local rule where the network is, or one trained here; the
# report's StarDist table names which.


if STARDIST_MODEL == "pretrained":

    rule stardist_pretrained:
        output:
            "results/stardist/{dataset}/model.json",
        log:
            "results/logs/stardist/{dataset}_model.log",
        conda:
            "../../envs/stardist.yaml"
        threads: threads_for("stardist_pretrained")
        resources:
            **resources_for("stardist_pretrained"),
        params:
            spec=canonical(config["experiments"].get("stardist", {})),
        script:
            "../scripts/stardist_model.py"

else:

    rule train_stardist:
        input:
            split="results/data/{dataset}/split.csv",
            gt="results/data/{dataset}/gt",
        output:
            "results/stardist/{dataset}/model.json",
        log:
            "results/logs/stardist/{dataset}_model.log",
        benchmark:
            "results/benchmarks/stardist_model/{dataset}.tsv"
        conda:
            "../../envs/stardist.yaml"
        threads: threads_for("train_stardist")
        resources:
            **resources_for("train_stardist"),
        params:
            spec=canonical(config["experiments"].get("stardist", {})),
            seed=config["seed"],
        script:
            "../scripts/stardist_model.py"


rule stardist_ap:
    input:
        unpack(stardist_inputs),
    output:
        table=report(
            "results/tables/stardist_{dataset}.csv",
            caption="../report/stardist.rst",
            category="StarDist downstream",
        ),
        per_image="results/tables/stardist_{dataset}_per_image.csv",
        stats="results/tables/stardist_{dataset}_stats.csv",
    log:
        "results/logs/stardist/{dataset}_ap.log",
    benchmark:
        "results/benchmarks/stardist_ap/{dataset}.tsv"
    conda:
        "../../envs/stardist.yaml"
    threads: threads_for("stardist_ap")
    resources:
        **resources_for("stardist_ap"),
    params:
        spec=canonical(config["experiments"].get("stardist", {})),
        resampling=resampling,
    script:
        "../scripts/stardist_ap.py"
