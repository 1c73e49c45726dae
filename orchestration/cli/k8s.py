"""`esp k8s …`: esp's Kubernetes material, rendered from its settings; never applied by esp.

    esp k8s render --out k8s/ [--config esp.yaml] [--k8s kubernetes.yaml]

See docs/kubernetes.md for what changes on Kubernetes and how to apply the files.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from orchestration.cli.common import ConfigOption, console, friendly_errors

if TYPE_CHECKING:  # the command imports the renderers lazily, for a quick start
    from orchestration.k8s.objects import ManifestFile

k8s_app = typer.Typer(
    help="Kubernetes manifests and Helm values for esp, on paper (docs/kubernetes.md).", no_args_is_help=True
)


def _summary(files: tuple[ManifestFile, ...], out: Path) -> Table:
    table = Table(title=escape(f"written under {out}"))
    table.add_column("file", no_wrap=True)
    table.add_column("documents")
    for manifest in files:
        names = [
            f"{d.get('kind', 'values')} {d.get('metadata', {}).get('name', '')}".strip() for d in manifest.documents
        ]
        table.add_row(
            escape(manifest.path), escape(", ".join(names) if manifest.kind == "kubernetes" else "Helm values")
        )
    return table


@k8s_app.command("render")
def render(
    out: Path = typer.Option(
        ..., "--out", "-o", help="Folder to write into (created; files of the same names replaced)."
    ),
    k8s_config: Path | None = typer.Option(
        None,
        "--k8s",
        help="Kubernetes settings file (YAML or JSON: namespace, image, ...); default: built-in defaults.",
    ),
    validate: bool = typer.Option(
        True, "--validate/--no-validate", help="Check every document offline before writing (kubernetes-validate)."
    ),
    config: ConfigOption = None,
) -> None:
    """Render Spark-on-Kubernetes, Strimzi and Dagster Helm material from esp's settings."""
    with friendly_errors():
        from orchestration.k8s.render import render_all, write_manifests
        from orchestration.k8s.settings import KubernetesSettings
        from orchestration.k8s.validate import validate_files
        from orchestration.stack.project import load_settings

        settings = load_settings(config)
        k8s = KubernetesSettings.load(k8s_config)
        files = render_all(settings, k8s)
        if validate:
            problems = validate_files(files, k8s.kubernetes_version)
            if problems:
                raise ValueError(f"{len(problems)} problem(s), nothing written: " + "; ".join(map(str, problems)))
        write_manifests(files, out)
    console.print(_summary(files, out))
    if validate:
        console.print(
            f"validated offline: Kubernetes kinds strictly against the API schemas of {k8s.kubernetes_version}, "
            "Strimzi resources and Helm values against esp's contract schemas"
        )
    ns, chart = k8s.namespace, k8s.dagster_chart_version
    steps = [
        f"kubectl apply -f {out / '00-namespace.yaml'}",
        f"install the Strimzi operator watching namespace {ns}, then: kubectl apply -f {out / 'strimzi'}",
        f"replace the placeholders in {out / '20-object-store-secret.yaml'}, then: kubectl apply -f {out}",
        f"helm upgrade --install dagster dagster/dagster --version {chart} -n {ns} "
        f"-f {out / 'helm' / 'dagster-values.yaml'} --set postgresql.postgresqlPassword=...",
    ]
    console.print("to apply (never done by esp; docs/kubernetes.md):")
    for number, step in enumerate(steps, 1):
        console.print(f"  {number}. {escape(step)}", soft_wrap=True)
