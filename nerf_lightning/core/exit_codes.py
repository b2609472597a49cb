"""The exit codes a command ends with when it was stopped rather than failed, shared by every command
that can be stopped (a fit, a pipeline, a sweep), so a scheduler or a shell script tells "stopped, run
the same command again" from "failed" the same way whichever command it started."""

from __future__ import annotations

PREEMPTED_EXIT_CODE = 75
"""The default exit code of a preempted fit: ``EX_TEMPFAIL`` of ``sysexits.h`` ("a temporary failure;
the user is invited to retry"). Neither 0 (a scheduler would count the job as finished) nor a code a
crash gives (1; 128 + N for a process killed by signal N), so a Kubernetes ``podFailurePolicy`` or
SLURM's ``RequeueExit`` can single it out."""

INTERRUPTED_EXIT_CODE = 130
"""The exit code of a command stopped by Ctrl-C (SIGINT): 128 + 2, what a shell reports for a command
Ctrl-C ended."""
