"""`preflab serve`: the service Label Studio calls — its ML backend (/health, /setup, /predict) and the
webhook receiver (/webhook) — with the background workers that parse deliveries, reconcile with `ls sync`
and retrain on arrival. It sits above the report and below the shell's commands."""
