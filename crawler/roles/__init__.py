"""The composition root of each cluster role: ``crawler <role>`` builds one service
process from the stages, handing each what it needs of the others."""
