# Stage 4: whole-image evaluation of every trained method and of the blurred input itself.


rule evaluate:
    input:
        unpack(eval_data_inputs),
        model=trained_model,
    output:
        summary="results/eval/{dataset}/{method}/{level}/summary.json",
        per_image="results/eval/{dataset}/{method}/{level}/per_image.csv",
        restored=directory("results/eval/{dataset}/{method}/{level}/restored"),
    log:
        "results/logs/evaluate/{dataset}/{method}/{level}.log",
    benchmark:
        "results/benchmarks/evaluate/{dataset}/{method}/{level}.tsv"
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("evaluate")
    resources:
        **resources_for("evaluate"),
    params:
        evaluate=settings.evaluate_settings(config),
        keep_restored=keep_restored,
        device=config["device"],
    script:
        "../scripts/evaluate.py"


rule evaluate_input:
    input:
        unpack(eval_data_inputs),
    output:
        summary="results/eval/{dataset}/input/{level}/summary.json",
        per_image="results/eval/{dataset}/input/{level}/per_image.csv",
        restored=directory("results/eval/{dataset}/input/{level}/restored"),
    log:
        "results/logs/evaluate/{dataset}/input/{level}.log",
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("evaluate_input")
    resources:
        **resources_for("evaluate_input"),
    params:
        evaluate=canonical(
            {k: config["evaluate"][k] for k in ("tile", "overlap", "blend", "lpips")}
        ),
        keep_restored=keep_restored,
    script:
        "../scripts/evaluate.py"


# A seed replicate's evaluation: scored like any method, from its own training.
use rule evaluate as evaluate_replicate with:
    input:
        unpack(eval_data_inputs),
        model=replicate_model,
    output:
        summary="results/eval/{dataset}/{method}/seed={replicate}/{level}/summary.json",
        per_image="results/eval/{dataset}/{method}/seed={replicate}/{level}/per_image.csv",
        restored=directory(
            "results/eval/{dataset}/{method}/seed={replicate}/{level}/restored"
        ),
    log:
        "results/logs/evaluate/{dataset}/{method}/seed={replicate}/{level}.log",
    benchmark:
        "results/benchmarks/evaluate/{dataset}/{method}/seed={replicate}/{level}.tsv"
    threads: threads_for("evaluate_replicate")
    resources:
        **resources_for("evaluate_replicate"),
    params:
        keep_restored=lambda wc: edge_band_reads(wc.dataset, wc.method, wc.level),
        replicate=lambda wc: int(wc.replicate),
