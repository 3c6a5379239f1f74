"""gpu_backend/tuning"""
