from django.apps import AppConfig
from django.db.models.signals import pre_delete


def _archive_audit_trail(sender, instance, **kwargs) -> None:
    from governance.audit import audit_organization_archive

    audit_organization_archive(organization_id=instance.pk, name=instance.name, slug=instance.slug)


class GovernanceConfig(AppConfig):
    name = "governance"
    verbose_name = "Governance"

    def ready(self) -> None:
        from governance import checker
        from rivercore.gate import policy_checker_install

        policy_checker_install(checker)  # the engine's policy port
        # Deleting an organization, by any path (admin, shell, a service), archives
        # its audit trail: the entries stay (no constraint cascades into them) and a
        # closing ``organization_deleted`` entry is sealed and anchored after commit.
        pre_delete.connect(
            _archive_audit_trail, sender="tenancy.Organization", dispatch_uid="governance_audit_archive"
        )
