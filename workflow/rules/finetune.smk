# Fine-tuning (target `finetune`, docs/finetune.md): one network tuned on the config's `finetune` block, your
# own z-stacks, pairs or multi-plane slides, as `dgno finetune` tunes it, into results/finetune/. Generated
# stacks (finetune.synthetic, the demo's and the tests') are written first. Logic: dgno.workflow.finetune.
from dgno.workflow import finetune as finetune_plan

FINETUNE = finetune_plan.FILES


def finetune_inputs(wildcards):
    return finetune_plan.input_files(config, plan.trained_model)


def finetune_job(wildcards):
    return finetune_plan.job_settings(config)


def finetune_start(wildcards, input):
    return finetune_plan.start_settings(config, input.get("start"))


def finetune_stack_settings(wildcards):
    return finetune_plan.synthetic_settings(config)


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
        settings=finetune_stack_settings,
    script:
        "../scripts/finetune_stacks.py"


# A job stopped by SLURM's time limit (or killed) keeps results/finetune/checkpoint.pt; the retry resumes.
rule finetune:
    input:
        unpack(finetune_inputs),
    output:
        model=FINETUNE["model"],
        report=report(FINETUNE["report"], category="Fine-tuning"),
        markdown=FINETUNE["markdown"],
        summary=FINETUNE["summary"],
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
        job=finetune_job,
        start=finetune_start,
        device=config["device"],
        seed=config["seed"],
    script:
        "../scripts/finetune.py"
