"""gpu_backend/bench"""
