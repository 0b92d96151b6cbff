# Stage 1: sharp images (with label masks for nuclei data) and the train/val/test split of every dataset.


rule sharp_images:
    output:
        split="results/data/{dataset}/split.csv",
        gt=directory("results/data/{dataset}/gt"),
        manifest="results/data/{dataset}/manifest.json",
    log:
        "results/logs/data/{dataset}.log",
    wildcard_constraints:
        dataset="|".join(GENERATED),
    conda:
        "../../envs/dgno.yaml"
    params:
        dataset=dataset_cfg,
        seed=config["seed"],
    script:
        "../scripts/sharp_images.py"
