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
        **resources_for("train"),
    params:
        method=lambda wc: method_settings(wc.dataset, wc.method),
        levels=lambda wc: config["datasets"][wc.dataset]["train_levels"],
        train=lambda wc: train_settings(wc.dataset),
        scale=config["scale"],
        seed=config["seed"],
        device=config["device"],
    script:
        "../scripts/train.py"


# Seed replicate r >= 1 of a training (experiments.<name>.seeds): the same recipe with seed + r, in its
# own folder, so replicate 0 keeps the paths (and results) of a run without seeds.
use rule train as train_replicate with:
    output:
        model="results/train/{dataset}/{method}/seed={replicate}/model.pt",
        metrics="results/train/{dataset}/{method}/seed={replicate}/train_metrics.csv",
    log:
        "results/logs/train/{dataset}/{method}/seed={replicate}.log",
    benchmark:
        "results/benchmarks/train/{dataset}/{method}/seed={replicate}.tsv"
    threads: threads_for("train_replicate")
    resources:
        **resources_for("train_replicate"),
    params:
        seed=lambda wc: training_seed(int(wc.replicate)),
