"""What several test files share, so that no test imports another test file or ``conftest``
(``tests/test_suite_layout.py`` checks it): run arguments and the in-process entry point (``runs``),
small datasets written to disk (``datasets``), a real browser (``browser``), test-only training
callbacks (``ddp``, ``kill``, ``signals``), small file systems (``small_disk``, ``fill_disk``), owned
numerical state (``numerics``), commands in processes forked from the test's (``pipeline_session``,
``process_saver``) or sharing one warm server (``sweep_starter``), and the suite's own machinery
(``slow_guard``, ``scheduling``)."""
