"""The benchmark harness: this crawler next to Scrapy on a generated web (see README.md)."""
