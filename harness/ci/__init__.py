"""The CI layer: the pull-request bot, nightly triage, reruns and the static checks of the workflows.

Layer order and rule: ARCHITECTURE.md, "Harness layers"."""
