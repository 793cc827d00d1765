"""What the user sets, in layers: built-in defaults < the user's config files < --config FILE < the night file <
the command line, each value remembering where it was set.

- options.py: every option declared once (type, help, scope, commands, where it lands); the rest derive from it;
- layers.py: the options' layers, checked by one model, merged into a run's and a night's settings;
- night_file.py: the night file (TOML): repositories, their tasks and the night's [defaults];
- durations.py: durations (45s, 90m) and end times (06:30) as the user writes them;
- runs_dir.py: where run records go when no --runs-dir says (never inside a repository of the run);
- cli.py: `config show`: each setting with its value and where it was set; --config FILE.
"""
