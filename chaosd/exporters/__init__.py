"""Exporters: Prometheus metrics read from snapshots at scrape time, and OpenTelemetry traces."""
