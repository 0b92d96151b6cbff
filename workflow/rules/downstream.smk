# Stage 5: the StarDist downstream check (TensorFlow, in its own environment).


rule stardist_model:
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
    params:
        spec=canonical(config["experiments"].get("stardist", {})),
        seed=config["seed"],
    script:
        "../scripts/stardist_model.py"


rule stardist_ap:
    input:
        unpack(stardist_inputs),
    output:
        report(
            "results/tables/stardist_{dataset}.csv",
            caption="../report/stardist.rst",
            category="StarDist downstream",
        ),
    log:
        "results/logs/stardist/{dataset}_ap.log",
    benchmark:
        "results/benchmarks/stardist_ap/{dataset}.tsv"
    conda:
        "../../envs/stardist.yaml"
    params:
        spec=canonical(config["experiments"].get("stardist", {})),
    script:
        "../scripts/stardist_ap.py"
