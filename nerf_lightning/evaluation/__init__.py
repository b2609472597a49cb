"""Per-view evaluation of a test run: metrics, the report files and the worst-views grid."""
