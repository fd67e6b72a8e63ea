"""Simulator operations, one mixin per concept, shared by REST, GraphQL, control API and tests."""
