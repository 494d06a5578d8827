"""Run the operators on Spark through the PySpark Python Data Source API."""
