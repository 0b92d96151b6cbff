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
    threads: threads_for("train")
    resources:
        mem_mb=mem_mb_for("train"),
        runtime=runtime_for("train"),
        gpu=gpu_for("train"),
    params:
        method=lambda wc: method_settings(wc.dataset, wc.method),
        levels=lambda wc: config["datasets"][wc.dataset]["train_levels"],
        train=lambda wc: train_settings(wc.dataset),
        scale=config["scale"],
        seed=config["seed"],
        device=config["device"],
    script:
        "../scripts/train.py"
