# Stage 3: training. CPU locally; on a cluster the slurm profile gives this rule a GPU.


rule train:
    input:
        unpack(train_inputs),
    output:
        model="results/train/{dataset}/{method}/model.pt",
        metrics="results/train/{dataset}/{method}/train_metrics.csv",
    log:
        "results/logs/train/{dataset}/{method}.log",
    benchmark:
        "results/benchmarks/train/{dataset}/{method}.tsv"
    conda:
        "../../envs/dgno.yaml"
    resources:
        gpu=1 if config["device"] != "cpu" else 0,
    params:
        method=lambda wc: canonical(
            {k: v for k, v in config["methods"][wc.method].items() if k != "label"}
        ),
        levels=lambda wc: config["datasets"][wc.dataset]["train_levels"],
        # prefetch only changes speed, not results: kept out of params so that changing it
        # does not retrain; the script reads it from the config.
        train=canonical({k: v for k, v in config["train"].items() if k != "prefetch"}),
        scale=config["scale"],
        seed=config["seed"],
        device=config["device"],
    script:
        "../scripts/train.py"
