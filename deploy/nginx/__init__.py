"""The nginx edge for N local replicas: a commented template and its renderer."""
