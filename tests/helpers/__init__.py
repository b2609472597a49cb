"""What several test files share: run arguments, dataset writers, browser and DDP helpers. No test
imports another test file or ``conftest``; they import from here."""
