# The authors' released checkpoints: downloaded where the network is, imported, then evaluated
# like any trained model (rule evaluate reads results/official/... for methods with `official`).


rule official_checkpoint:
    output:
        f"{RAW}/official/{{name}}.pth",
    log:
        "results/logs/download/official_{name}.log",
    wildcard_constraints:
        name=r"[A-Za-z0-9_.-]+",
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("official_checkpoint")
    resources:
        **resources_for("official_checkpoint"),
    params:
        url=lambda wc: config["downloads"]["official_url"] + f"{wc.name}.pth",
        sha256=lambda wc: config["downloads"]["official_sha256"].get(wc.name),
        retries=config["downloads"]["retries"],
    script:
        "../scripts/official_fetch.py"


rule import_official:
    input:
        checkpoint=official_checkpoint,
    output:
        model="results/official/{dataset}/{method}/model.pt",
    log:
        "results/logs/official/{dataset}/{method}.log",
    conda:
        "../../envs/dgno.yaml"
    threads: threads_for("import_official")
    resources:
        **resources_for("import_official"),
    params:
        options=official_options,
    script:
        "../scripts/import_official.py"
