# Stage 2: spatially varying blur of the sharp images, one folder per blur level.


rule sigma_blur:
    input:
        split="results/data/{dataset}/split.csv",
        gt="results/data/{dataset}/gt",
    output:
        blur=directory("results/data/{dataset}/blur/{level}"),
        sigma=directory("results/data/{dataset}/sigma/{level}"),
    log:
        "results/logs/blur/{dataset}/{level}.log",
    benchmark:
        "results/benchmarks/blur/{dataset}/{level}.tsv"
    wildcard_constraints:
        dataset="|".join(GENERATED),
    conda:
        "../../envs/dgno.yaml"
    params:
        dataset=dataset_cfg,
    script:
        "../scripts/sigma_blur.py"
