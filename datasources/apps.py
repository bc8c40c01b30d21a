from django.apps import AppConfig


class DatasourcesConfig(AppConfig):
    name = "datasources"
    verbose_name = "Data sources"
