# Call 0: as call 1 with CHECK_VARIANTS=1 DEEPSEEK=.gpu/deepseek; it stopped after the variant's checks
# (long_ab.sh then sourced step.sh after defining its own `step`, which step.sh replaced).
