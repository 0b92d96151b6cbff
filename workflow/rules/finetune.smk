# Fine-tuning (target `finetune`, docs/finetune.md): one network tuned on the config's `finetune` block, your
# own z-stacks, pairs or multi-plane slides, as `dgno finetune` tunes it, into results/finetune/. Generated
# stacks (finetune.synthetic, the demo's and the tests') are written first. What each job reads and gets:
# dgno.workflow.finetune (plan.trained_model resolves a {method, dataset} start).
from dgno.workflow import finetune as finetune_plan


rule finetune_stacks:
    output:
        finetune_plan.GENERATED,
    log:
        "results/logs/finetune/stacks.log",
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("finetune_stacks")
    resources:
        **resources_for("finetune_stacks"),
    params:
        settings=lambda wc: finetune_plan.synthetic_settings(config),
    script:
        "../scripts/finetune_stacks.py"


# A job stopped by SLURM's time limit (or killed) keeps results/finetune/checkpoint.pt; the retry resumes.
rule finetune:
    input:
        unpack(lambda wc: finetune_plan.input_files(config, plan.trained_model)),
    output:
        model=finetune_plan.FILES["model"],
        report=report(finetune_plan.FILES["report"], category="Fine-tuning"),
        markdown=finetune_plan.FILES["markdown"],
        summary=finetune_plan.FILES["summary"],
    log:
        "results/logs/finetune/finetune.log",
    benchmark:
        "results/benchmarks/finetune.tsv"
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("finetune")
    resources:
        **resources_for("finetune"),
    params:
        job=lambda wc: finetune_plan.job_settings(config),
        start=lambda wc, input: finetune_plan.start_settings(config, input.get("start")),
        device=config["device"],
        seed=config["seed"],
    script:
        "../scripts/finetune.py"
