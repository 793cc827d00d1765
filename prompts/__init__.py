"""Prompt texts live beside this file as Markdown, shipped as package data."""

from importlib.resources import files


def load_prompt(name: str) -> str:
    return files(__name__).joinpath(f"{name}.md").read_text(encoding="utf-8")
