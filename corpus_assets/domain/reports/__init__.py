"""dbt-like SQL report models over the layers and the catalog."""
